// load_model, load_model_from_bytes and load_tensor_proto: parse, validate (basic sanity, external
// data confinement, the ONNX checker), infer shapes, convert to Kiln's IR.
#include <fmt/format.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <climits>
#include <unordered_map>
#include <unordered_set>

#include "core/file_io.h"
#include "kiln/onnx_io.h"
#include "onnx/external_data.h"
#include "onnx/graph_from_proto.h"
#include "onnx/guarded_schemas.h"
#include "onnx/proto_file.h"
#include "onnx/tensor_proto.h"

namespace kiln {

using namespace onnxio;

namespace {

[[noreturn]] void invalid(const std::string& label, const std::string& why) {
  throw InvalidModel(fmt::format("'{}' is not a valid ONNX model: {}", label, why));
}

// Protobuf happily parses many byte strings (random bytes included) into a ModelProto with a few
// stray fields; a real model always has these.
void check_basics(const onnx::ModelProto& m, const std::string& label) {
  if (!m.has_graph()) invalid(label, "it has no graph (is it an ONNX model file?)");
  if (m.ir_version() <= 0) invalid(label, fmt::format("its ir_version is {} (missing or corrupt)", m.ir_version()));
  if (m.opset_import_size() == 0) invalid(label, "it imports no operator set (opset_import is empty)");
  if (m.functions_size() > 0)
    throw Unsupported(fmt::format("'{}' defines model-local functions ('{}'...), which Kiln does not support yet",
                                  label, m.functions(0).name()));
}

// Every tensor of a graph, subgraphs included, for the external-data walk below.
template <class F>
void for_each_tensor(const onnx::GraphProto& g, F&& f) {
  for (const auto& t : g.initializer()) f(t);
  for (const auto& n : g.node())
    for (const auto& a : n.attribute()) {
      if (a.has_t()) f(a.t());
      for (const auto& t : a.tensors()) f(t);
      if (a.has_g()) for_each_tensor(a.g(), f);
      for (const auto& sub : a.graphs()) for_each_tensor(sub, f);
    }
}

// Confines every external location before anything (the ONNX checker included) opens a path.
void check_external_locations(const onnx::ModelProto& m, const std::string& base_dir, const LoadOptions& options) {
  if (base_dir.empty() && !options.load_external_data) return;
  for_each_tensor(m.graph(), [&](const onnx::TensorProto& t) {
    if (is_external(t)) (void)resolve_external_data(t, base_dir);
  });
}

// onnx::checker::check_model(ModelProto) checks external files relative to the process's working
// folder; the context form below (the same steps check_model takes) resolves them beside the model.
void run_checker(const onnx::ModelProto& m, const std::string& base_dir, const std::string& label) {
  namespace checker = onnx::checker;
  try {
    std::unordered_set<std::string> keys;
    for (const auto& entry : m.metadata_props())
      if (!keys.insert(entry.key()).second) invalid(label, fmt::format("metadata key '{}' appears twice", entry.key()));
    std::unordered_map<std::string, int> opsets;
    for (const auto& op : m.opset_import()) opsets[op.domain()] = static_cast<int>(op.version());
    checker::CheckerContext ctx;
    // Newer exporters write IR 9 or 10; the graph rules this checker knows are the same, so check
    // such models as the newest IR it knows rather than refusing them.
    ctx.set_ir_version(static_cast<int>(std::min<int64_t>(m.ir_version(), onnx::IR_VERSION)));
    ctx.set_opset_imports(opsets);
    if (!base_dir.empty()) ctx.set_model_dir(base_dir + "/");
    checker::LexicalScopeContext lex;
    checker::check_graph(m.graph(), ctx, lex);
    if (m.ir_version() >= 8) checker::check_model_local_functions(m, ctx, lex);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    invalid(label, "the ONNX checker rejects it: " + one_line(e.what()) +
                       " (LoadOptions::run_checker = false skips the checker)");
  }
}

// Shape inference only adds hints (value_info); a model it cannot handle is still loadable, so a
// failure restores the hints the file had.
void infer_shapes(onnx::ModelProto& m) {
  const auto saved = m.graph().value_info();
  try {
    onnx::shape_inference::InferShapes(m, onnxio::guarded_schema_registry());
  } catch (...) {
    *m.mutable_graph()->mutable_value_info() = saved;
  }
}

Model model_from_proto(onnx::ModelProto& m, const ReadOptions& read) {
  Model model;
  for (const auto& op : m.opset_import()) model.opsets[normalise_domain(op.domain())] = op.version();
  model.ir_version = m.ir_version();
  model.producer_name = m.producer_name();
  model.producer_version = m.producer_version();
  model.domain = m.domain();
  model.model_version = m.model_version();
  model.doc_string = m.doc_string();
  for (const auto& entry : m.metadata_props()) model.metadata[entry.key()] = entry.value();
  model.graph = graph_from_proto(*m.mutable_graph(), read);
  return model;
}

}  // namespace

Model load_model_from_bytes(const std::string& bytes, const std::string& base_dir, const LoadOptions& options,
                            const std::string& label) {
  if (bytes.empty()) invalid(label, "it is empty (0 bytes)");
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    invalid(label, fmt::format("it is {} bytes, over protobuf's 2 GiB limit; store the weights as external data",
                               bytes.size()));
  onnx::ModelProto proto;
  if (!parse_message(bytes, &proto))
    invalid(label,
            fmt::format("its {} bytes do not parse as an onnx.ModelProto (truncated, not ONNX, or messages nested "
                        "deeper than {} levels)",
                        bytes.size(), onnxio::kMaxProtoDepth));
  check_basics(proto, label);
  try {
    check_external_locations(proto, base_dir, options);
  } catch (Error& e) {
    e.add_context(fmt::format("'{}': ", label));
    throw;
  }
  if (options.run_checker) run_checker(proto, base_dir, label);
  if (options.infer_shapes) infer_shapes(proto);
  try {
    return model_from_proto(proto, ReadOptions{TensorSource{base_dir, label}, options.load_external_data});
  } catch (Error& e) {
    e.add_context(fmt::format("'{}': ", label));
    throw;
  }
}

Model load_model(const std::string& path, const LoadOptions& options) {
  const std::string bytes = read_file_bytes(path, "model");
  Model model = load_model_from_bytes(bytes, folder_of(path), options, path);
  model.source_path = path;
  return model;
}

Tensor load_tensor_proto(const std::string& path) {
  const std::string bytes = read_file_bytes(path, "tensor file");
  onnx::TensorProto proto;
  if (!parse_message(bytes, &proto))
    throw InvalidModel(
        fmt::format("'{}' is not a valid onnx.TensorProto file: its {} bytes do not parse", path, bytes.size()));
  if (proto.data_type() == onnx::TensorProto::UNDEFINED)
    throw InvalidModel(
        fmt::format("'{}' is not a valid onnx.TensorProto file: it has no data_type ({} bytes)", path, bytes.size()));
  try {
    return tensor_from_proto(proto, TensorSource{folder_of(path), path});
  } catch (Error& e) {
    e.add_context(fmt::format("'{}': ", path));
    throw;
  }
}

}  // namespace kiln

// save_model, serialize_model and save_tensor_proto: Kiln's IR -> onnx.ModelProto, tensors as
// little-endian raw_data inline or, for large models, in an external data file; written atomically.
#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "core/atomic_file.h"
#include "ir/subgraph.h"
#include "kiln/onnx_io.h"
#include "onnx/model_proto.h"
#include "onnx/proto_file.h"
#include "onnx/tensor_proto.h"

namespace kiln {

using namespace onnxio;

namespace {

namespace fs = std::filesystem;

// v's type into `type`: its tensor type, wrapped in a sequence and / or an optional by its kind.
void type_to_proto(const ValueInfo& v, onnx::TypeProto* type) {
  if (v.kind == ValueKind::OptionalTensor || v.kind == ValueKind::OptionalSequence)
    type = type->mutable_optional_type()->mutable_elem_type();
  if (v.kind == ValueKind::Sequence || v.kind == ValueKind::OptionalSequence)
    type = type->mutable_sequence_type()->mutable_elem_type();
  auto* tt = type->mutable_tensor_type();
  if (v.has_type) tt->set_elem_type(dtype_to_onnx(v.dtype));
  if (!v.has_shape) return;  // unknown rank: no shape field at all (an empty shape means a scalar)
  auto* shape = tt->mutable_shape();
  for (const Dim& d : v.dims) {
    auto* dim = shape->add_dim();
    if (d.value >= 0) dim->set_dim_value(d.value);
    else if (!d.param.empty()) dim->set_dim_param(d.param);
  }
}

void value_info_to_proto(const ValueInfo& v, onnx::ValueInfoProto* out) {
  out->set_name(v.name);
  if (!v.doc_string.empty()) out->set_doc_string(v.doc_string);
  if (!v.has_type && !v.has_shape && v.kind == ValueKind::Tensor) return;
  type_to_proto(v, out->mutable_type());
}

void graph_to_proto(const Graph& g, onnx::GraphProto* out, const ExternalLayout* external = nullptr);

void attribute_to_proto(const std::string& name, const Attribute& a, onnx::AttributeProto* out) {
  using A = onnx::AttributeProto;
  out->set_name(name);
  switch (a.kind) {
    case Attribute::Kind::Float:
      out->set_type(A::FLOAT);
      out->set_f(a.f);
      break;
    case Attribute::Kind::Int:
      out->set_type(A::INT);
      out->set_i(a.i);
      break;
    case Attribute::Kind::String:
      out->set_type(A::STRING);
      out->set_s(a.s);
      break;
    case Attribute::Kind::Tensor:
      out->set_type(A::TENSOR);
      tensor_to_proto(a.t, "", out->mutable_t());
      break;
    case Attribute::Kind::Graph:
      if (!a.g) throw InvalidArgument(fmt::format("graph attribute '{}' holds no graph", name));
      out->set_type(A::GRAPH);
      graph_to_proto(*a.g, out->mutable_g());
      break;
    case Attribute::Kind::Floats:
      out->set_type(A::FLOATS);
      out->mutable_floats()->Add(a.floats.begin(), a.floats.end());
      break;
    case Attribute::Kind::Ints:
      out->set_type(A::INTS);
      out->mutable_ints()->Add(a.ints.begin(), a.ints.end());
      break;
    case Attribute::Kind::Strings:
      out->set_type(A::STRINGS);
      for (const auto& s : a.strings) out->add_strings(s);
      break;
    case Attribute::Kind::Tensors:
      out->set_type(A::TENSORS);
      for (const auto& t : a.tensors) tensor_to_proto(t, "", out->add_tensors());
      break;
    case Attribute::Kind::Type:
      if (!a.type) throw InvalidArgument(fmt::format("type attribute '{}' holds no type", name));
      out->set_type(A::TYPE_PROTO);
      type_to_proto(*a.type, out->mutable_tp());
      break;
  }
}

void node_to_proto(const Node& lifted, onnx::NodeProto* out) {
  const Node n = unlifted(lifted);  // ONNX's If / Loop / Scan read outer values by name only
  if (!n.name.empty()) out->set_name(n.name);
  out->set_op_type(n.op_type);
  if (!n.domain.empty()) out->set_domain(n.domain);
  if (!n.doc_string.empty()) out->set_doc_string(n.doc_string);
  for (const auto& in : n.inputs) out->add_input(in);
  for (const auto& o : n.outputs) out->add_output(o);
  for (const auto& [key, attr] : n.attrs) {
    try {
      attribute_to_proto(key, attr, out->add_attribute());
    } catch (Error& e) {
      e.add_context(fmt::format("{}, attribute '{}': ", n.label(), key));
      throw;
    }
  }
}

void graph_to_proto(const Graph& g, onnx::GraphProto* out, const ExternalLayout* external) {
  // The ONNX checker requires every graph, subgraphs included, to have a name.
  out->set_name(g.name.empty() ? "graph" : g.name);
  if (!g.doc_string.empty()) out->set_doc_string(g.doc_string);
  for (const Node& n : g.nodes) node_to_proto(n, out->add_node());
  for (const ValueInfo& v : g.inputs) value_info_to_proto(v, out->add_input());
  // IR < 4 style: an input with an initializer is a default the caller may override.
  for (const ValueInfo& v : g.overridable_initializers) value_info_to_proto(v, out->add_input());
  for (const ValueInfo& v : g.outputs) value_info_to_proto(v, out->add_output());
  for (const ValueInfo& v : g.value_info) value_info_to_proto(v, out->add_value_info());
  for (const auto& [name, tensor] : g.initializers) {
    const auto it = external ? external->offsets.find(name) : std::map<std::string, uint64_t>::const_iterator();
    if (external && it != external->offsets.end())
      external_tensor_to_proto(tensor, name, external->location, it->second, out->add_initializer());
    else tensor_to_proto(tensor, name, out->add_initializer());
  }
}

// Initializers past this many bytes in all go to external data under ExternalData::Auto: protobuf's
// limit less room for the graph.
constexpr uint64_t kInlineLimit = static_cast<uint64_t>(INT_MAX) - (uint64_t{64} << 20);
constexpr uint64_t kAlignment = 64;

bool wants_external(const Model& model, const SaveOptions& o) {
  if (o.external_data != SaveOptions::ExternalData::Auto) return o.external_data == SaveOptions::ExternalData::Always;
  uint64_t bytes = 0;
  for (const auto& [name, t] : model.graph.initializers) bytes += t.nbytes();
  return bytes > kInlineLimit;
}

// The external data file the model now at `path` reads (its first external initializer's location),
// or "" when there is no such model, it has none, or it cannot be read as a model.
std::string live_data_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  onnx::ModelProto m;
  if (!in.good() && !in.eof()) return "";
  if (bytes.empty() || !parse_message(bytes, &m)) return "";
  for (const auto& t : m.graph().initializer())
    if (is_external(t))
      for (const auto& e : t.external_data())
        if (e.key() == "location") return e.value();
  return "";
}

// Writes the initializers of `size_threshold` bytes or more to `dir/location`, atomically.
ExternalLayout write_external_data(const Model& model, const fs::path& dir, const std::string& location,
                                   size_t size_threshold) {
  ExternalLayout layout{location, {}};
  AtomicFile data((dir / location).string());
  uint64_t offset = 0;
  static const char zeros[kAlignment] = {};
  for (const auto& [name, t] : model.graph.initializers) {
    if (t.nbytes() < size_threshold || t.nbytes() == 0 || t.dtype() == DType::String) continue;  // strings: inline
    const uint64_t pad = (kAlignment - offset % kAlignment) % kAlignment;
    data.write(zeros, pad);
    offset += pad;
    const Tensor packed = t.contiguous();
    data.write(packed.raw_data(), packed.nbytes());
    layout.offsets[name] = offset;
    offset += packed.nbytes();
  }
  data.commit();
  return layout;
}

}  // namespace

namespace onnxio {

onnx::ModelProto model_to_proto(const Model& model, const ExternalLayout* external) {
  onnx::ModelProto m;
  m.set_ir_version(model.ir_version);
  if (!model.producer_name.empty()) m.set_producer_name(model.producer_name);
  if (!model.producer_version.empty()) m.set_producer_version(model.producer_version);
  if (!model.domain.empty()) m.set_domain(model.domain);
  if (model.model_version != 0) m.set_model_version(model.model_version);
  if (!model.doc_string.empty()) m.set_doc_string(model.doc_string);
  for (const auto& [domain, version] : model.opsets) {
    auto* op = m.add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
  }
  for (const auto& [key, value] : model.metadata) {
    auto* entry = m.add_metadata_props();
    entry->set_key(key);
    entry->set_value(value);
  }
  graph_to_proto(model.graph, m.mutable_graph(), external);
  return m;
}

std::string serialize_message(const google::protobuf::MessageLite& message, const std::string& what) {
  const size_t size = message.ByteSizeLong();
  if (size > static_cast<size_t>(INT_MAX))
    throw Unsupported(
        fmt::format("{} would be {} bytes, over protobuf's 2 GiB limit; store its initializers as external data "
                    "(SaveOptions::external_data)",
                    what, size));
  std::string bytes;
  if (!message.SerializeToString(&bytes)) throw Error(fmt::format("serializing {} failed", what));
  return bytes;
}

}  // namespace onnxio

std::string serialize_model(const Model& model) { return serialize_message(model_to_proto(model), "the model"); }

void save_model(const Model& model, const std::string& path, const SaveOptions& options) {
  const std::string what = fmt::format("model '{}'", path);
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string file = target.filename().string();
  const std::string candidates[2] = {file + ".data", file + ".1.data"};
  std::error_code ec;
  const bool had_data = fs::exists(dir / candidates[0], ec) || fs::exists(dir / candidates[1], ec);
  const std::string live = had_data ? live_data_file(path) : "";
  std::string location;
  if (wants_external(model, options)) {
    location = live == candidates[0] ? candidates[1] : candidates[0];
    const ExternalLayout layout = write_external_data(model, dir, location, options.size_threshold);
    write_file_atomically(path, serialize_message(model_to_proto(model, &layout), what));
  } else {
    write_file_atomically(path, serialize_message(model_to_proto(model), what));
  }
  // The replaced model's data file (and any a killed save left), named after this model, is read by
  // nothing now.
  if (had_data)
    for (const std::string& c : candidates)
      if (c != location) fs::remove(dir / c, ec);
}

void save_tensor_proto(const Tensor& tensor, const std::string& name, const std::string& path) {
  onnx::TensorProto proto;
  tensor_to_proto(tensor, name, &proto);
  write_file_atomically(path, serialize_message(proto, fmt::format("tensor file '{}'", path)));
}

}  // namespace kiln

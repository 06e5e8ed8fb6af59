// save_model, serialize_model and save_tensor_proto: Kiln's IR -> onnx.ModelProto, every tensor
// inline as little-endian raw_data, written atomically.
#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <climits>

#include "core/atomic_file.h"
#include "kiln/onnx_io.h"
#include "onnx/tensor_proto.h"

namespace kiln {

using namespace onnxio;

namespace {

void value_info_to_proto(const ValueInfo& v, onnx::ValueInfoProto* out) {
  out->set_name(v.name);
  if (!v.doc_string.empty()) out->set_doc_string(v.doc_string);
  if (!v.has_type && !v.has_shape) return;
  auto* tt = out->mutable_type()->mutable_tensor_type();
  if (v.has_type) tt->set_elem_type(dtype_to_onnx(v.dtype));
  if (!v.has_shape) return;  // unknown rank: no shape field at all (an empty shape means a scalar)
  auto* shape = tt->mutable_shape();
  for (const Dim& d : v.dims) {
    auto* dim = shape->add_dim();
    if (d.value >= 0) dim->set_dim_value(d.value);
    else if (!d.param.empty()) dim->set_dim_param(d.param);
  }
}

void graph_to_proto(const Graph& g, onnx::GraphProto* out);

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
  }
}

void node_to_proto(const Node& n, onnx::NodeProto* out) {
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

void graph_to_proto(const Graph& g, onnx::GraphProto* out) {
  // The ONNX checker requires every graph, subgraphs included, to have a name.
  out->set_name(g.name.empty() ? "graph" : g.name);
  if (!g.doc_string.empty()) out->set_doc_string(g.doc_string);
  for (const Node& n : g.nodes) node_to_proto(n, out->add_node());
  for (const ValueInfo& v : g.inputs) value_info_to_proto(v, out->add_input());
  // IR < 4 style: an input with an initializer is a default the caller may override.
  for (const ValueInfo& v : g.overridable_initializers) value_info_to_proto(v, out->add_input());
  for (const ValueInfo& v : g.outputs) value_info_to_proto(v, out->add_output());
  for (const ValueInfo& v : g.value_info) value_info_to_proto(v, out->add_value_info());
  for (const auto& [name, tensor] : g.initializers) tensor_to_proto(tensor, name, out->add_initializer());
}

onnx::ModelProto model_to_proto(const Model& model) {
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
  graph_to_proto(model.graph, m.mutable_graph());
  return m;
}

std::string serialize(const google::protobuf::MessageLite& message, const std::string& what) {
  const size_t size = message.ByteSizeLong();
  if (size > static_cast<size_t>(INT_MAX))
    throw Unsupported(
        fmt::format("{} would be {} bytes, over protobuf's 2 GiB limit; Kiln does not write external "
                    "data yet",
                    what, size));
  std::string bytes;
  if (!message.SerializeToString(&bytes)) throw Error(fmt::format("serializing {} failed", what));
  return bytes;
}

}  // namespace

std::string serialize_model(const Model& model) { return serialize(model_to_proto(model), "the model"); }

void save_model(const Model& model, const std::string& path) {
  write_file_atomically(path, serialize(model_to_proto(model), fmt::format("model '{}'", path)));
}

void save_tensor_proto(const Tensor& tensor, const std::string& name, const std::string& path) {
  onnx::TensorProto proto;
  tensor_to_proto(tensor, name, &proto);
  write_file_atomically(path, serialize(proto, fmt::format("tensor file '{}'", path)));
}

}  // namespace kiln

#include "onnx/graph_from_proto.h"

#include <fmt/format.h>

#include <optional>
#include <set>

namespace kiln::onnxio {

using onnx::AttributeProto;

namespace {

const char* type_case_name(const onnx::TypeProto& t) {
  switch (t.value_case()) {
    case onnx::TypeProto::kSequenceType:
      return "a sequence";
    case onnx::TypeProto::kMapType:
      return "a map";
    case onnx::TypeProto::kOptionalType:
      return "an optional";
    case onnx::TypeProto::kSparseTensorType:
      return "a sparse tensor";
    default:
      return "not a tensor";
  }
}

// The tensor type `tt` into v's dtype and dims; false when its element type has no Kiln form.
bool read_tensor_type(const onnx::TypeProto::Tensor& tt, ValueInfo& v) {
  if (tt.elem_type() != onnx::TensorProto::UNDEFINED) {
    const auto dtype = dtype_from_onnx(tt.elem_type());
    if (!dtype) return false;
    v.dtype = *dtype;
    v.has_type = true;
  }
  if (tt.has_shape()) {
    v.has_shape = true;
    for (const auto& d : tt.shape().dim()) {
      Dim dim;
      if (d.has_dim_value()) dim.value = d.dim_value();
      if (d.has_dim_param()) dim.param = d.dim_param();
      v.dims.push_back(dim);
    }
  }
  return true;
}

// The tensor type inside `t` (a tensor, a sequence of tensors, an optional of either) with the
// kind it is wrapped in; nullptr for maps, sparse tensors and deeper nesting.
const onnx::TypeProto::Tensor* unwrap_type(const onnx::TypeProto& t, ValueKind& kind) {
  const onnx::TypeProto* inner = &t;
  bool optional = false;
  if (inner->has_optional_type()) {
    optional = true;
    inner = &inner->optional_type().elem_type();
  }
  bool sequence = false;
  if (inner->has_sequence_type()) {
    sequence = true;
    inner = &inner->sequence_type().elem_type();
  }
  if (!inner->has_tensor_type()) return nullptr;
  kind = sequence ? (optional ? ValueKind::OptionalSequence : ValueKind::Sequence)
                  : (optional ? ValueKind::OptionalTensor : ValueKind::Tensor);
  return &inner->tensor_type();
}

// A declared type (a graph input or output when `role` names it; else an intermediate value_info,
// whose unsupported type is only a missing hint: nullopt).
std::optional<ValueInfo> value_info_from_type(const onnx::TypeProto& type, ValueInfo v, const char* role) {
  // Maps, sparse tensors and sequences of sequences have no Kiln form.
  const onnx::TypeProto::Tensor* tt = unwrap_type(type, v.kind);
  if (tt == nullptr) {
    if (role == nullptr) return std::nullopt;
    throw Unsupported(
        fmt::format("{} '{}' is {}; Kiln supports tensors, sequences of tensors and optionals of "
                    "those",
                    role, v.name, type_case_name(type)));
  }
  if (!read_tensor_type(*tt, v)) {
    if (role == nullptr) return std::nullopt;
    throw Unsupported(fmt::format("{} '{}' has element type {}, which Kiln does not support", role, v.name,
                                  onnx_type_name(tt->elem_type())));
  }
  return v;
}

std::optional<ValueInfo> value_info_from_proto(const onnx::ValueInfoProto& proto, const char* role) {
  ValueInfo v;
  v.name = proto.name();
  v.doc_string = proto.doc_string();
  if (!proto.has_type()) return v;
  return value_info_from_type(proto.type(), std::move(v), role);
}

// Files from IR version 1 may leave AttributeProto.type unset; the filled field then says the kind.
AttributeProto::AttributeType attribute_type(const AttributeProto& a) {
  if (a.type() != AttributeProto::UNDEFINED) return a.type();
  if (a.has_f()) return AttributeProto::FLOAT;
  if (a.has_i()) return AttributeProto::INT;
  if (a.has_s()) return AttributeProto::STRING;
  if (a.has_t()) return AttributeProto::TENSOR;
  if (a.has_g()) return AttributeProto::GRAPH;
  if (a.floats_size()) return AttributeProto::FLOATS;
  if (a.ints_size()) return AttributeProto::INTS;
  if (a.strings_size()) return AttributeProto::STRINGS;
  if (a.tensors_size()) return AttributeProto::TENSORS;
  if (a.has_tp()) return AttributeProto::TYPE_PROTO;
  return AttributeProto::UNDEFINED;
}

class Reader {
 public:
  explicit Reader(const ReadOptions& options) : options_(options) {}

  Graph graph(onnx::GraphProto& proto) {
    Graph g;
    g.name = proto.name();
    g.doc_string = proto.doc_string();
    if (proto.sparse_initializer_size() > 0)
      throw Unsupported(fmt::format("graph '{}' has sparse initializer '{}'; Kiln does not support sparse tensors",
                                    g.name, proto.sparse_initializer(0).values().name()));
    for (auto& init : *proto.mutable_initializer()) {
      if (init.name().empty()) throw InvalidModel(fmt::format("graph '{}' has an initializer without a name", g.name));
      if (g.initializers.count(init.name()))
        throw InvalidModel(fmt::format("graph '{}' has two initializers named '{}'", g.name, init.name()));
      if (is_external(init) && !options_.load_external_data) {
        g.value_info.push_back(placeholder(init));
        continue;
      }
      g.initializers.emplace(init.name(), tensor_from_proto(init, options_.source));
      init.clear_raw_data();
    }
    for (const auto& in : proto.input()) {
      ValueInfo v = *value_info_from_proto(in, "graph input");
      (g.initializers.count(v.name) ? g.overridable_initializers : g.inputs).push_back(std::move(v));
    }
    for (const auto& out : proto.output()) g.outputs.push_back(*value_info_from_proto(out, "graph output"));
    for (const auto& vi : proto.value_info())
      if (auto v = value_info_from_proto(vi, nullptr)) g.value_info.push_back(std::move(*v));
    g.nodes.reserve(static_cast<size_t>(proto.node_size()));
    for (auto& n : *proto.mutable_node()) g.nodes.push_back(node(n));
    return g;
  }

 private:
  // What is known of an initializer whose bytes were not read: name, dtype and shape.
  static ValueInfo placeholder(const onnx::TensorProto& init) {
    ValueInfo v;
    v.name = init.name();
    const auto dtype = dtype_from_onnx(init.data_type());
    v.has_type = dtype.has_value();
    if (dtype) v.dtype = *dtype;
    v.has_shape = true;
    for (int64_t d : proto_shape(init)) v.dims.push_back(Dim{d, ""});
    v.doc_string = "external data not loaded";
    return v;
  }

  Node node(onnx::NodeProto& proto) {
    Node n;
    n.name = proto.name();
    n.op_type = proto.op_type();
    n.domain = normalise_domain(proto.domain());
    n.doc_string = proto.doc_string();
    n.inputs.assign(proto.input().begin(), proto.input().end());
    n.outputs.assign(proto.output().begin(), proto.output().end());
    for (auto& a : *proto.mutable_attribute()) {
      if (a.name().empty()) throw InvalidModel(fmt::format("{} has an attribute without a name", n.label()));
      try {
        n.attrs[a.name()] = attribute(a);
      } catch (Error& e) {
        e.add_context(fmt::format("{}, attribute '{}': ", n.label(), a.name()));
        throw;
      }
    }
    return n;
  }

  Tensor tensor(const onnx::TensorProto& t) {
    if (is_external(t) && !options_.load_external_data)
      throw Unsupported(
          fmt::format("tensor '{}' is stored in external data, which this load was asked not to read "
                      "(LoadOptions::load_external_data = false)",
                      t.name()));
    return tensor_from_proto(t, options_.source);
  }

  Attribute attribute(AttributeProto& a) {
    Attribute out;
    switch (attribute_type(a)) {
      case AttributeProto::FLOAT:
        return Attribute::of_float(a.f());
      case AttributeProto::INT:
        return Attribute::of_int(a.i());
      case AttributeProto::STRING:
        return Attribute::of_string(a.s());
      case AttributeProto::TENSOR:
        out = Attribute::of_tensor(tensor(a.t()));
        a.mutable_t()->clear_raw_data();
        return out;
      case AttributeProto::FLOATS:
        return Attribute::of_floats({a.floats().begin(), a.floats().end()});
      case AttributeProto::INTS:
        return Attribute::of_ints({a.ints().begin(), a.ints().end()});
      case AttributeProto::STRINGS:
        return Attribute::of_strings({a.strings().begin(), a.strings().end()});
      case AttributeProto::GRAPH:
        out.kind = Attribute::Kind::Graph;
        out.g = std::make_shared<Graph>(graph(*a.mutable_g()));
        return out;
      case AttributeProto::TENSORS:
        out.kind = Attribute::Kind::Tensors;
        for (const auto& t : a.tensors()) out.tensors.push_back(tensor(t));
        return out;
      case AttributeProto::TYPE_PROTO:
        return Attribute::of_type(*value_info_from_type(a.tp(), ValueInfo{}, "the type"));
      case AttributeProto::UNDEFINED:
        if (a.has_ref_attr_name())
          throw Unsupported(fmt::format("reference to function attribute '{}' outside a function", a.ref_attr_name()));
        throw InvalidModel("the attribute has neither a type nor a value");
      default:
        throw Unsupported(
            fmt::format("attribute type {} is not supported by Kiln", AttributeProto::AttributeType_Name(a.type())));
    }
  }

  const ReadOptions& options_;
};

}  // namespace

std::string normalise_domain(const std::string& domain) { return domain == "ai.onnx" ? std::string() : domain; }

Graph graph_from_proto(onnx::GraphProto& proto, const ReadOptions& options) { return Reader(options).graph(proto); }

}  // namespace kiln::onnxio

// Kiln's IR: a Model holds a Graph of Nodes that name their input and output Values. It is plain
// data, close to ONNX, so that loading, rewriting (passes, autodiff) and saving stay simple.
//
//   kiln::Model m = kiln::load_model("net.onnx");
//   for (const kiln::Node& n : m.graph.nodes) std::cout << n.op_type << "\n";
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

// The domain of the ops Kiln defines (gradient and optimizer kernels), next to ONNX's "" (ai.onnx).
inline const std::string kKilnDomain = "ai.kiln";

// One dimension of a declared shape: a number, a symbolic name, or unknown.
struct Dim {
  int64_t value = -1;  // -1: not a fixed number
  std::string param;   // symbolic name ("batch"), if any
};

// A value's declared type: a tensor's dtype and dims, or a sequence's / optional's (`kind`), whose
// elements' dtype and dims these then are.
struct ValueInfo {
  std::string name;
  DType dtype = DType::Float32;
  bool has_type = false;
  bool has_shape = false;
  std::vector<Dim> dims;
  std::string doc_string;
  ValueKind kind = ValueKind::Tensor;
  // A value typed and shaped as tensor `t` (fixed dims).
  static ValueInfo of(const std::string& name, const Tensor& t);
  // "float[batch, 3, 224, 224]", "sequence(float[?])"
  std::string describe() const;
  bool matches(const Shape& s) const;  // rank equal and every fixed dim equal
};

struct Graph;

struct Attribute {
  enum class Kind { Float, Int, String, Tensor, Graph, Floats, Ints, Strings, Tensors, Type };
  Kind kind = Kind::Int;
  float f = 0.f;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::shared_ptr<const ValueInfo> type;  // Kind::Type (ONNX's TYPE_PROTO: the Optional op's `type`)

  static Attribute of_float(float v);
  static Attribute of_int(int64_t v);
  static Attribute of_string(std::string v);
  static Attribute of_tensor(Tensor v);
  static Attribute of_floats(std::vector<float> v);
  static Attribute of_ints(std::vector<int64_t> v);
  static Attribute of_strings(std::vector<std::string> v);
  static Attribute of_type(ValueInfo v);
};
const char* attribute_kind_name(Attribute::Kind k);

inline const std::string kOnnxDomain = "";  // "ai.onnx" is normalised to ""

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;               // "" for the default ONNX domain
  std::vector<std::string> inputs;  // "" marks an omitted optional input
  std::vector<std::string> outputs;
  std::map<std::string, Attribute> attrs;
  std::string doc_string;

  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
  // Typed attribute reads; a present attribute of the wrong kind is an InvalidModel error that
  // names the node. The one-argument forms throw if the attribute is absent.
  int64_t attr_int(const std::string& key) const;
  int64_t attr_int(const std::string& key, int64_t fallback) const;
  float attr_float(const std::string& key) const;
  float attr_float(const std::string& key, float fallback) const;
  std::string attr_string(const std::string& key) const;
  std::string attr_string(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& key) const;
  std::vector<int64_t> attr_ints(const std::string& key, const std::vector<int64_t>& fallback) const;
  std::vector<float> attr_floats(const std::string& key, const std::vector<float>& fallback) const;
  const Tensor& attr_tensor(const std::string& key) const;
  // "node 'conv1' (Conv)", for error messages.
  std::string label() const;
};

struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::vector<ValueInfo> inputs;  // excludes initializers, as written by current exporters
  std::vector<ValueInfo> outputs;
  std::vector<ValueInfo> value_info;
  std::map<std::string, Tensor> initializers;
  // Graph inputs that also have an initializer (IR < 4 style): the feed may override them.
  std::vector<ValueInfo> overridable_initializers;
  std::string doc_string;

  const ValueInfo* find_value_info(const std::string& name) const;
  // Indices of nodes in an order where every node follows its producers; throws InvalidModel on a
  // cycle or a value that nothing produces, naming the node and value.
  std::vector<size_t> topological_order() const;
};

struct Model {
  Graph graph;
  std::map<std::string, int64_t> opsets;  // domain ("" = ai.onnx) -> version
  int64_t ir_version = 8;
  std::string producer_name = "kiln";
  std::string producer_version;
  std::string domain;
  int64_t model_version = 0;
  std::string doc_string;
  std::map<std::string, std::string> metadata;
  std::string source_path;  // file it was loaded from, for messages; empty if built in memory

  int64_t opset(const std::string& domain = "") const;  // 0 if the domain is not imported
};

}  // namespace kiln

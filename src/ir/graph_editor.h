// GraphEditor: the one way Kiln adds to a graph — the artifact generator, the gradient builder, the
// nn Tracer and the loss blocks all add nodes, constants and names through it, so that every
// generated name is unique in the model and follows one scheme ("base", else "base_1", "base_2").
// Below it, generic graph surgery: declared value infos, initializers turned into inputs, pruning.
//
//   GraphEditor edit(model);
//   std::string y = edit.op("Relu", {x});                  // node "Relu/Relu", output "Relu"
//   std::string w = edit.constant("scale", Tensor::scalar<float>(2.f));
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/graph.h"

namespace kiln {

class GraphEditor {
 public:
  // Collects every name the model already uses (values, nodes, graph inputs and outputs).
  explicit GraphEditor(Model& model);
  GraphEditor(const GraphEditor&) = delete;  // two editors of one model would hand out the same names
  GraphEditor& operator=(const GraphEditor&) = delete;

  Model& model() { return model_; }
  // A name nothing in the model uses yet ("base", else "base_1", ...), now reserved.
  std::string fresh(const std::string& base);
  // Marks a name as used (a value added by hand, say).
  void reserve(const std::string& name) { names_.insert(name); }
  bool has_value(const std::string& name) const { return names_.count(name) != 0; }
  // Appends a node as it is (names chosen by the caller); its names become reserved.
  Node& add_node(Node node);
  // Adds a node and returns its first output (named fresh from `base`, or the op type).
  std::string op(const std::string& op_type, std::vector<std::string> inputs,
                 std::map<std::string, Attribute> attrs = {}, const std::string& base = "",
                 const std::string& domain = "");
  // A constant initializer under a fresh name.
  std::string constant(const std::string& base, Tensor value);

 private:
  void reserve_names_of(const Node& n);
  Model& model_;
  std::set<std::string> names_;
};

// The ValueInfo of a value (graph input/output, value_info or initializer), if the model declares one.
const ValueInfo* find_declared(const Graph& g, const std::string& name);

// The dtype a value is declared with: an initializer's, else the first typed ValueInfo among the
// graph inputs, value_info (shape inference's hints) and outputs. nullopt: not declared.
std::optional<DType> declared_dtype(const Graph& g, const std::string& name);

// A Cast node (domain ai.onnx) named `name` from `input` to `output` of type `to`.
Node cast_node(std::string name, std::string input, std::string output, DType to);

// Moves these initializers to graph inputs (typed and shaped as the tensor), in the given order,
// after the existing inputs.
void initializers_to_inputs(Graph& g, const std::vector<std::string>& names);

// Removes nodes no graph output needs, then initializers and graph inputs nothing reads
// (inputs listed in `keep_inputs` stay).
void prune(Graph& g, const std::set<std::string>& keep_inputs = {});

// Standard ONNX ops only? Returns the first node of another domain, or nullptr.
const Node* first_non_standard_node(const Graph& g);

}  // namespace kiln

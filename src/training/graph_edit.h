// GraphEditor: the graph surgery artifact generation needs — adding nodes and constants under
// fresh names, turning initializers into graph inputs, pruning to the nodes some outputs need,
// and switching training-mode ops to inference mode.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "kiln/graph.h"

namespace kiln::training {

class GraphEditor {
 public:
  explicit GraphEditor(Model& model);

  // A name no value, node or graph input of the model uses yet ("base", else "base_1", ...).
  std::string fresh(const std::string& base);
  // Adds a node and returns its first output (named fresh from `base`, or the op type).
  std::string op(const std::string& op_type, std::vector<std::string> inputs,
                 std::map<std::string, Attribute> attrs = {}, const std::string& base = "",
                 const std::string& domain = "");
  // A constant initializer under a fresh name.
  std::string constant(const std::string& base, Tensor value);
  bool has_value(const std::string& name) const { return names_.count(name) != 0; }

 private:
  Model& model_;
  std::set<std::string> names_;
};

// The ValueInfo of a value (graph input/output, value_info or initializer), if the model declares one.
const ValueInfo* find_declared(const Graph& g, const std::string& name);

// Moves these initializers to graph inputs (typed and shaped as the tensor), in the given order,
// after the existing inputs.
void initializers_to_inputs(Graph& g, const std::vector<std::string>& names);

// Removes nodes no graph output needs, then initializers and graph inputs nothing reads
// (inputs listed in `keep_inputs` stay).
void prune(Graph& g, const std::set<std::string>& keep_inputs = {});

// BatchNormalization in training mode normalises with the stored statistics instead, and its
// running-statistics outputs go; Dropout stops dropping (its training_mode input is omitted).
// Throws InvalidModel when a removed output is read by another node.
void to_inference_mode(Graph& g);

// Standard ONNX ops only? Returns the first node of another domain, or nullptr.
const Node* first_non_standard_node(const Graph& g);

}  // namespace kiln::training

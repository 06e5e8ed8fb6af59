// Gradient rules and their registry.
//
// How to add a gradient: in src/autodiff/<family>.cpp (the kernel family's name), write a free
// function that reads the forward node through the GradContext vocabulary — I(i) input, O(i)
// output, GO(i) gradient of output i, needs(i) whether input i needs a gradient — emits
// backward nodes with emit(), and hands each input's gradient to set_GI(). Register it next to it:
//
//   void relu_grad(GradContext& g) { g.set_GI(0, g.emit(kKilnDomain, "ReluGrad", {g.GO(0), g.O(0)})); }
//   const GradientRegistrar relu({"", "Relu"}, relu_grad);
//
// The builder sums gradients of values used several times; set_GI(i, x, Broadcast::Maybe) makes it
// reduce a gradient that may have the broadcast output shape to input i's shape. Ops whose outputs
// never carry gradients (Shape, comparisons, ArgMax...) register a NoGradient marker instead.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include "kiln/autodiff.h"
#include "kiln/graph.h"

namespace kiln {

enum class Broadcast { No, Maybe };

class GradientBuilderState;

class GradContext {
 public:
  GradContext(const Node& node, GradientBuilderState& state) : node(node), state_(state) {}
  const Node& node;

  const std::string& I(size_t i) const;
  const std::string& O(size_t i) const;
  // The gradient flowing into output i; "" if no gradient flows there (treat as zero).
  std::string GO(size_t i) const;
  // GO(i), or zeros shaped like O(i) when no gradient flows there.
  std::string GO_or_zeros(size_t i);
  bool needs(size_t i) const;  // input i needs a gradient
  size_t num_inputs() const { return node.inputs.size(); }
  size_t num_outputs() const { return node.outputs.size(); }
  bool has_input(size_t i) const { return i < node.inputs.size() && !node.inputs[i].empty(); }
  void set_GI(size_t i, const std::string& grad, Broadcast b = Broadcast::No);

  // Emits a node and returns its first output (the others get generated names too).
  std::string emit(const std::string& domain, const std::string& op, std::vector<std::string> inputs,
                   std::map<std::string, Attribute> attrs = {});
  std::string emit(const std::string& op, std::vector<std::string> inputs, std::map<std::string, Attribute> attrs = {}) {
    return emit("", op, std::move(inputs), std::move(attrs));
  }
  std::vector<std::string> emit_multi(const std::string& domain, const std::string& op, std::vector<std::string> inputs,
                                      size_t num_outputs, std::map<std::string, Attribute> attrs = {});
  // A Constant node holding `value`.
  std::string constant(const Tensor& value);
  // A scalar constant of the given value with the dtype of value `like` (float32 if unknown).
  std::string scalar_like(double value, const std::string& like);
  // Static facts from value_info / initializers; nullopt when unknown.
  std::optional<int64_t> rank(const std::string& value) const;
  std::optional<DType> dtype(const std::string& value) const;
  int64_t opset() const;

 private:
  GradientBuilderState& state_;
};

using GradientRule = std::function<void(GradContext&)>;

struct OpKey {
  std::string domain;
  std::string op_type;
  bool operator<(const OpKey& o) const { return std::tie(domain, op_type) < std::tie(o.domain, o.op_type); }
};

class GradientRegistry {
 public:
  static GradientRegistry& global();
  void add_rule(OpKey key, GradientRule rule);
  void add_no_gradient(OpKey key);
  const GradientRule* rule(const std::string& domain, const std::string& op) const;
  bool no_gradient(const std::string& domain, const std::string& op) const;

 private:
  std::map<OpKey, GradientRule> rules_;
  std::map<OpKey, bool> no_gradient_;
};

struct GradientRegistrar {
  GradientRegistrar(OpKey key, GradientRule rule) { GradientRegistry::global().add_rule(std::move(key), std::move(rule)); }
};
// Marks ops whose outputs carry no gradient (shapes, comparisons, indices, random draws).
struct NoGradient {
  explicit NoGradient(std::initializer_list<OpKey> keys) {
    for (const OpKey& k : keys) GradientRegistry::global().add_no_gradient(k);
  }
};

}  // namespace kiln

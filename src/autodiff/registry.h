// Gradient rules and their registry.
//
// How to add a gradient: in src/autodiff/<family>.cpp, named like the kernel family file
// src/kernels/cpu/<family>.cpp that registers the op, write a free function that reads the forward
// node through the GradContext vocabulary — I(i) input, O(i) output, GO(i) gradient of output i,
// needs(i) whether input i needs a gradient — emits backward nodes with emit(), and hands each
// input's gradient to set_GI(). Register it next to it for a range of the domain's opsets, as
// kernels are (since_version, end_version inclusive):
//
//   void relu_grad(GradContext& g) { g.set_GI(0, g.emit(kKilnDomain, "ReluGrad", {g.GO(0), g.O(0)})); }
//   const GradientRegistrar relu({"", "Relu", 1, kMaxOpset}, relu_grad);
//
// The builder looks rules up by the node's opset (model.opset(node.domain)), sums gradients of
// values used several times, and reduces them to the input's shape when set_GI(i, x, Broadcast::Maybe)
// says x may have the broadcast output shape. Ops whose outputs never carry gradients (Shape,
// comparisons, ArgMax...) register a NoGradient marker instead. docs/adding-an-op.md walks through
// adding an op with its gradient.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/autodiff.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

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
  std::string emit(const std::string& op, std::vector<std::string> inputs,
                   std::map<std::string, Attribute> attrs = {}) {
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
  // Why ranks are unknown, for the messages of rules that need one: " (inferring the forward
  // graph failed at: <error>)" when Kiln's shape inference stopped on an invalid node, else "".
  std::string unknown_rank_reason() const;
  std::optional<DType> dtype(const std::string& value) const;
  int64_t opset() const;

 private:
  GradientBuilderState& state_;
};

using GradientRule = std::function<void(GradContext&)>;

// What a rule or marker covers: an op of a domain at opsets since_version..end_version (inclusive)
// of that domain, like a KernelDef. Every field is spelled out at registration.
struct GradientDef {
  GradientDef(std::string domain, std::string op_type, int64_t since_version, int64_t end_version)
      : domain(std::move(domain)),
        op_type(std::move(op_type)),
        since_version(since_version),
        end_version(end_version) {}
  std::string domain;
  std::string op_type;
  int64_t since_version;
  int64_t end_version;

  bool covers(int64_t opset) const { return since_version <= opset && opset <= end_version; }
  std::string range() const;  // "13+", "1-12", "7"
};

struct GradientEntry {
  GradientDef def;
  GradientRule rule;  // empty for a NoGradient marker
  std::string file;   // the source file that registered it (the coverage test checks its name)
  bool no_gradient() const { return !rule; }
};

struct OpKey {
  std::string domain;
  std::string op_type;
  bool operator<(const OpKey& o) const { return std::tie(domain, op_type) < std::tie(o.domain, o.op_type); }
};

class GradientRegistry {
 public:
  static GradientRegistry& global();
  void add(GradientDef def, GradientRule rule, std::string file);
  // The rule or marker covering the op at `opset` of its domain; nullptr when none does.
  const GradientEntry* find(const std::string& domain, const std::string& op, int64_t opset) const;
  // "1-12, 13+": the opset ranges the op's rules and markers cover; "" when it has none.
  std::string ranges(const std::string& domain, const std::string& op) const;
  const std::map<OpKey, std::vector<GradientEntry>>& entries() const { return entries_; }

 private:
  std::map<OpKey, std::vector<GradientEntry>> entries_;
};

struct GradientRegistrar {
  // __builtin_FILE() rather than std::source_location, which clang-tidy's clang 14 cannot compile
  // with this libstdc++.
  GradientRegistrar(GradientDef def, GradientRule rule, const char* file = __builtin_FILE()) {
    GradientRegistry::global().add(std::move(def), std::move(rule), file);
  }
};
// Marks ops whose outputs carry no gradient (shapes, comparisons, indices, random draws).
struct NoGradient {
  explicit NoGradient(std::initializer_list<GradientDef> defs, const char* file = __builtin_FILE()) {
    for (const GradientDef& d : defs) GradientRegistry::global().add(d, nullptr, file);
  }
};

}  // namespace kiln

// Gradient rules of Softmax and LogSoftmax (kernels/cpu/softmax.cpp), registered from opset 13: the
// rules handle the opset 13 semantics (one axis), not the 2-D flattening of opsets 1-12, so a node at
// an earlier opset has no rule and the builder says which opsets have one. Hardmax has no gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

std::string sum_axis(GradContext& g, const std::string& x, int64_t axis) {
  return g.emit("ReduceSum", {x, g.constant(Tensor::from_vector<int64_t>({1}, {axis}))},
                {{"keepdims", Attribute::of_int(1)}});
}

// y = softmax(x): dx = y * (g - sum(g * y)); one ai.kiln.SoftmaxGrad pass for float types.
void softmax_grad(GradContext& g) {
  const int64_t axis = g.node.attr_int("axis", -1);
  if (const auto t = g.dtype(g.O(0)); t == DType::Float32 || t == DType::Float64) {
    g.set_GI(0, g.emit(kKilnDomain, "SoftmaxGrad", {g.GO(0), g.O(0)}, {{"axis", Attribute::of_int(axis)}}));
    return;
  }
  const std::string dot = sum_axis(g, g.emit("Mul", {g.GO(0), g.O(0)}), axis);
  g.set_GI(0, g.emit("Mul", {g.O(0), g.emit("Sub", {g.GO(0), dot})}));
}

// y = log_softmax(x): dx = g - exp(y) * sum(g).
void log_softmax_grad(GradContext& g) {
  const int64_t axis = g.node.attr_int("axis", -1);
  const std::string total = sum_axis(g, g.GO(0), axis);
  g.set_GI(0, g.emit("Sub", {g.GO(0), g.emit("Mul", {g.emit("Exp", {g.O(0)}), total})}));
}

const GradientRegistrar r_softmax({"", "Softmax", 13, kMaxOpset}, softmax_grad);
const GradientRegistrar r_log_softmax({"", "LogSoftmax", 13, kMaxOpset}, log_softmax_grad);
const NoGradient none({{"", "Hardmax", 1, kMaxOpset}});

}  // namespace
}  // namespace kiln

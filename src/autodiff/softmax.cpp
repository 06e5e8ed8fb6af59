// Gradient rules of Softmax and LogSoftmax (kernels/cpu/softmax.cpp), opset 13 semantics (one axis).
#include <fmt/format.h>

#include "autodiff/registry.h"

namespace kiln {
namespace {

std::string sum_axis(GradContext& g, const std::string& x, int64_t axis) {
  return g.emit("ReduceSum", {x, g.constant(Tensor::from_vector<int64_t>({1}, {axis}))},
                {{"keepdims", Attribute::of_int(1)}});
}

void check_opset(GradContext& g) {
  if (g.opset() < 13)
    throw Unsupported(fmt::format("gradient of {} before opset 13 (2-D flattening semantics) is not implemented",
                                  g.node.op_type));
}

// y = softmax(x): dx = y * (g - sum(g * y)).
void softmax_grad(GradContext& g) {
  check_opset(g);
  const int64_t axis = g.node.attr_int("axis", -1);
  const std::string dot = sum_axis(g, g.emit("Mul", {g.GO(0), g.O(0)}), axis);
  g.set_GI(0, g.emit("Mul", {g.O(0), g.emit("Sub", {g.GO(0), dot})}));
}

// y = log_softmax(x): dx = g - exp(y) * sum(g).
void log_softmax_grad(GradContext& g) {
  check_opset(g);
  const int64_t axis = g.node.attr_int("axis", -1);
  const std::string total = sum_axis(g, g.GO(0), axis);
  g.set_GI(0, g.emit("Sub", {g.GO(0), g.emit("Mul", {g.emit("Exp", {g.O(0)}), total})}));
}

const GradientRegistrar r_softmax({"", "Softmax"}, softmax_grad);
const GradientRegistrar r_log_softmax({"", "LogSoftmax"}, log_softmax_grad);
const NoGradient none({{"", "Hardmax"}});

}  // namespace
}  // namespace kiln

// Gradient rules of the pools (kernels/cpu/pool.cpp). MaxPool and AveragePool emit ai.kiln ops that
// know the window geometry; the global pools are standard ops: the mean's gradient is dY spread
// evenly, the max's goes to the positions equal to the maximum.
#include "autodiff/registry.h"

namespace kiln {
namespace {

// MaxPoolGrad recomputes the argmax from X, so the Indices output (a NoGradient value) is not needed.
void max_pool_grad(GradContext& g) {
  g.set_GI(0, g.emit(kKilnDomain, "MaxPoolGrad", {g.GO_or_zeros(0), g.I(0)}, g.node.attrs));
}

void average_pool_grad(GradContext& g) {
  g.set_GI(0, g.emit(kKilnDomain, "AveragePoolGrad", {g.GO_or_zeros(0), g.I(0)}, g.node.attrs));
}

// Y = mean over the spatial dims: dX = Expand(dY / count, shape(X)), count = size(X) / size(Y).
void global_average_pool_grad(GradContext& g) {
  const auto to = Attribute::of_int(dtype_to_onnx(g.dtype(g.I(0)).value_or(DType::Float32)));
  const std::string count = g.emit("Div", {g.emit("Cast", {g.emit("Size", {g.I(0)})}, {{"to", to}}),
                                           g.emit("Cast", {g.emit("Size", {g.O(0)})}, {{"to", to}})});
  g.set_GI(0, g.emit("Expand", {g.emit("Div", {g.GO(0), count}), g.emit("Shape", {g.I(0)})}));
}

// Y = max over the spatial dims: dX = dY where X equals its plane's maximum (every tied position
// gets it; ties have no derivative anyway).
void global_max_pool_grad(GradContext& g) {
  const auto to = Attribute::of_int(dtype_to_onnx(g.dtype(g.I(0)).value_or(DType::Float32)));
  const std::string mask = g.emit("Cast", {g.emit("Equal", {g.I(0), g.O(0)})}, {{"to", to}});
  g.set_GI(0, g.emit("Mul", {mask, g.GO(0)}));
}

const GradientRegistrar r_max({"", "MaxPool", 1, kMaxOpset}, max_pool_grad);
const GradientRegistrar r_avg({"", "AveragePool", 1, kMaxOpset}, average_pool_grad);
const GradientRegistrar r_global_avg({"", "GlobalAveragePool", 1, kMaxOpset}, global_average_pool_grad);
const GradientRegistrar r_global_max({"", "GlobalMaxPool", 1, kMaxOpset}, global_max_pool_grad);

}  // namespace
}  // namespace kiln

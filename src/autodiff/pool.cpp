// Gradient rules of the pools (kernels/cpu/pool.cpp). MaxPool, AveragePool and GlobalAveragePool
// emit ai.kiln ops (kernels/cpu/pool_grad.cpp); GlobalMaxPool's is standard ops: the max's
// gradient goes to the positions equal to the maximum.
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

// Y = mean over the spatial dims: dX = dY / count spread over each plane (ai.kiln.GlobalAveragePoolGrad).
void global_average_pool_grad(GradContext& g) {
  g.set_GI(0, g.emit(kKilnDomain, "GlobalAveragePoolGrad", {g.GO(0), g.I(0)}));
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

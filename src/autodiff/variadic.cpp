// Gradient rules of the variadic ops Sum, Mean, Max and Min (kernels/cpu/variadic.cpp). They
// broadcast their inputs, so each input's gradient goes through the builder's reduction to its shape.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void sum_grad(GradContext& g) {
  for (size_t i = 0; i < g.num_inputs(); ++i) g.set_GI(i, g.GO(0), Broadcast::Maybe);
}

void mean_grad(GradContext& g) {
  const std::string scaled = g.emit("Div", {g.GO(0), g.scalar_like(static_cast<double>(g.num_inputs()), g.O(0))});
  for (size_t i = 0; i < g.num_inputs(); ++i) g.set_GI(i, scaled, Broadcast::Maybe);
}

// Max/Min: the gradient goes where the input equals the result (to every tied input, as PyTorch's
// max(a, b) splits evenly only for its two-input form; ONNX has no rule — this is ORT's choice).
void extremum_grad(GradContext& g) {
  for (size_t i = 0; i < g.num_inputs(); ++i) {
    if (!g.needs(i)) continue;
    const std::string mask =
        g.emit("Cast", {g.emit("Equal", {g.I(i), g.O(0)})},
               {{"to", Attribute::of_int(dtype_to_onnx(g.dtype(g.O(0)).value_or(DType::Float32)))}});
    g.set_GI(i, g.emit("Mul", {g.GO(0), mask}), Broadcast::Maybe);
  }
}

const GradientRegistrar r_sum({"", "Sum", 1, kMaxOpset}, sum_grad);
const GradientRegistrar r_mean({"", "Mean", 1, kMaxOpset}, mean_grad);
const GradientRegistrar r_max({"", "Max", 1, kMaxOpset}, extremum_grad);
const GradientRegistrar r_min({"", "Min", 1, kMaxOpset}, extremum_grad);

}  // namespace
}  // namespace kiln

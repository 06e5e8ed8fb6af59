// Gradient rules of ReduceSum and ReduceMean (kernels/cpu/reduce.cpp): the output gradient is
// broadcast back over the reduced axes (and divided by their size for the mean).
#include <fmt/format.h>

#include "autodiff/registry.h"

namespace kiln {
namespace {

// The axes of a reduction node as a value (from its input or attribute); "" means all axes.
std::string axes_value(GradContext& g, bool axes_as_input) {
  if (axes_as_input) return g.has_input(1) ? g.I(1) : "";
  const auto axes = g.node.attr_ints("axes", {});
  if (axes.empty()) return "";
  return g.constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(axes.size())}, axes));
}

std::string broadcast_back(GradContext& g, bool axes_as_input) {
  std::string grad = g.GO(0);
  const std::string axes = axes_value(g, axes_as_input);
  if (g.node.attr_int("keepdims", 1) == 0 && !axes.empty()) grad = g.emit("Unsqueeze", {grad, axes});
  // keepdims=0 over all axes gives a scalar, which Expand broadcasts as it is.
  return g.emit("Expand", {grad, g.emit("Shape", {g.I(0)})});
}

void check_noop(GradContext& g, bool axes_as_input) {
  if (g.node.attr_int("noop_with_empty_axes", 0) != 0 && axes_value(g, axes_as_input).empty())
    throw Unsupported("gradient of a reduction with noop_with_empty_axes=1 and no axes is not implemented");
}

void reduce_sum_grad(GradContext& g) {
  const bool as_input = g.opset() >= 13;
  check_noop(g, as_input);
  g.set_GI(0, broadcast_back(g, as_input));
}

void reduce_mean_grad(GradContext& g) {
  const bool as_input = g.opset() >= 18;
  check_noop(g, as_input);
  const std::string expanded = broadcast_back(g, as_input);
  // count = size(x) / size(y), in x's dtype.
  const auto t = g.dtype(g.I(0)).value_or(DType::Float32);
  const auto to = Attribute::of_int(dtype_to_onnx(t));
  const std::string count = g.emit("Div", {g.emit("Cast", {g.emit("Size", {g.I(0)})}, {{"to", to}}),
                                           g.emit("Cast", {g.emit("Size", {g.O(0)})}, {{"to", to}})});
  g.set_GI(0, g.emit("Div", {expanded, count}));
}

const GradientRegistrar r_sum({"", "ReduceSum"}, reduce_sum_grad);
const GradientRegistrar r_mean({"", "ReduceMean"}, reduce_mean_grad);
const NoGradient none({{"", "ArgMax"}, {"", "ArgMin"}});

}  // namespace
}  // namespace kiln

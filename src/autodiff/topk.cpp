// Gradient rule of TopK (kernels/cpu/topk.cpp): the values' gradient is scattered back to the
// positions the indices name, zeros elsewhere. The indices output carries none.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void topk_grad(GradContext& g) {
  const std::string grad = g.GO(0);
  if (grad.empty()) return;  // only the indices are used downstream
  // The forward's indices when it kept them; otherwise a second TopK recomputes them.
  std::string indices = g.num_outputs() > 1 && !g.O(1).empty() ? g.O(1) : "";
  if (indices.empty()) {
    std::vector<std::string> ins;
    for (size_t i = 0; i < g.num_inputs(); ++i) ins.push_back(g.node.inputs[i]);
    indices = g.emit_multi("", "TopK", ins, 2, g.node.attrs)[1];
  }
  const int64_t axis = g.node.attr_int("axis", -1);
  const auto t = g.dtype(g.I(0)).value_or(DType::Float32);
  const std::string zeros =
      g.emit("ConstantOfShape", {g.emit("Shape", {g.I(0)})}, {{"value", Attribute::of_tensor(Tensor::zeros(t, {1}))}});
  // ScatterElements is opset 11; Scatter, its deprecated earlier name, has the same semantics.
  const char* scatter = g.opset() >= 11 ? "ScatterElements" : "Scatter";
  g.set_GI(0, g.emit(scatter, {zeros, indices, grad}, {{"axis", Attribute::of_int(axis)}}));
}

const GradientRegistrar r_topk({"", "TopK", 1, kMaxOpset}, topk_grad);

}  // namespace
}  // namespace kiln

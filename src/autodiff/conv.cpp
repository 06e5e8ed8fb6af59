// Gradient rule of Conv (kernels/cpu/conv.cpp): one ai.kiln.ConvGrad node computes dX, dW and dB
// together (they share dY and oneDNN's backward primitives), told by output_mask which it needs, so
// a first layer (no dX) or a bias-free Conv costs no extra work.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void conv_grad(GradContext& g) {
  const bool bias = g.has_input(2) && g.needs(2);
  const std::vector<int64_t> mask{g.needs(0) ? 1 : 0, g.needs(1) ? 1 : 0, bias ? 1 : 0};
  std::map<std::string, Attribute> attrs = g.node.attrs;  // group, strides, dilations, pads, auto_pad
  attrs["output_mask"] = Attribute::of_ints(mask);
  const auto d = g.emit_multi(kKilnDomain, "ConvGrad", {g.GO_or_zeros(0), g.I(0), g.I(1)}, 3, std::move(attrs));
  g.set_GI(0, d[0]);
  g.set_GI(1, d[1]);
  if (bias) g.set_GI(2, d[2]);
}

const GradientRegistrar r_conv({"", "Conv", 1, kMaxOpset}, conv_grad);

}  // namespace
}  // namespace kiln

// Gradient rule of ConvTranspose (kernels/cpu/conv_transpose.cpp): one ai.kiln.ConvTransposeGrad
// node (a Conv of dY by W for dX, a Conv weight gradient for dW), told by output_mask which of
// dX, dW, dB it needs. A dedicated op rather than a standard Conv because output_shape, auto_pad
// and output_padding resolve to pads only once the input shape is known, and may leave output
// positions that no input reaches (a negative pad, which Conv cannot express).
#include "autodiff/registry.h"

namespace kiln {
namespace {

void conv_transpose_grad(GradContext& g) {
  const bool bias = g.has_input(2) && g.needs(2);
  const std::vector<int64_t> mask{g.needs(0) ? 1 : 0, g.needs(1) ? 1 : 0, bias ? 1 : 0};
  std::map<std::string, Attribute> attrs = g.node.attrs;
  attrs["output_mask"] = Attribute::of_ints(mask);
  const auto d =
      g.emit_multi(kKilnDomain, "ConvTransposeGrad", {g.GO_or_zeros(0), g.I(0), g.I(1)}, 3, std::move(attrs));
  g.set_GI(0, d[0]);
  g.set_GI(1, d[1]);
  if (bias) g.set_GI(2, d[2]);
}

const GradientRegistrar r_conv_transpose({"", "ConvTranspose", 1, kMaxOpset}, conv_transpose_grad);

}  // namespace
}  // namespace kiln

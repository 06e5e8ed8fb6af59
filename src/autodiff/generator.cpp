// Gradient rules of the generators (kernels/cpu/generator.cpp). EyeLike, Range, OneHot and NonZero
// make constants or indices (their float inputs only choose shapes, positions or fill values, which
// PyTorch does not differentiate either). Trilu is a mask, so its gradient is the same mask.
#include "autodiff/registry.h"

namespace kiln {
namespace {

// The k input (if any) is an integer and gets no gradient.
void trilu_grad(GradContext& g) {
  std::vector<std::string> ins{g.GO(0)};
  if (g.has_input(1)) ins.push_back(g.I(1));
  g.set_GI(0, g.emit("Trilu", ins, {{"upper", Attribute::of_int(g.node.attr_int("upper", 1))}}));
}

const GradientRegistrar r_trilu({"", "Trilu", 1, kMaxOpset}, trilu_grad);
const NoGradient none({{"", "EyeLike", 1, kMaxOpset},
                       {"", "Range", 1, kMaxOpset},
                       {"", "OneHot", 1, kMaxOpset},
                       {"", "NonZero", 1, kMaxOpset}});

}  // namespace
}  // namespace kiln

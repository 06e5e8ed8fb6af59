// The gradient rule of ReverseSequence (kernels/cpu/reverse_sequence.cpp): a permutation that is
// its own inverse, so dX = ReverseSequence(dY) with the same lengths and axes.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void reverse_sequence_grad(GradContext& g) {
  if (g.needs(0)) g.set_GI(0, g.emit("ReverseSequence", {g.GO_or_zeros(0), g.I(1)}, g.node.attrs));
}

const GradientRegistrar r_reverse_sequence({"", "ReverseSequence", 10, kMaxOpset}, reverse_sequence_grad);

}  // namespace
}  // namespace kiln

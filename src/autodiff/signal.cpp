// Gradient rules of DFT and STFT (kernels/cpu/signal.cpp): both are linear in their float inputs,
// so the gradients are adjoint transforms, ai.kiln.DFTGrad and ai.kiln.STFTGrad
// (kernels/cpu/signal_grad.cpp). MelWeightMatrix is built from scalar settings: no gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void dft_grad(GradContext& g) {
  if (!g.needs(0)) return;
  g.set_GI(0, g.emit(kKilnDomain, "DFTGrad", {g.GO_or_zeros(0), g.I(0), g.has_input(1) ? g.I(1) : ""}, g.node.attrs));
}

void stft_grad(GradContext& g) {
  const bool window = g.has_input(2);
  if (!g.needs(0) && !(window && g.needs(2))) return;
  const std::vector<std::string> d = g.emit_multi(
      kKilnDomain, "STFTGrad", {g.GO_or_zeros(0), g.I(0), g.I(1), window ? g.I(2) : "", g.has_input(3) ? g.I(3) : ""},
      2, g.node.attrs);
  if (g.needs(0)) g.set_GI(0, d[0]);
  if (window && g.needs(2)) g.set_GI(2, d[1]);
}

const GradientRegistrar r_dft({"", "DFT", 17, 19}, dft_grad);
const GradientRegistrar r_stft({"", "STFT", 17, kMaxOpset}, stft_grad);
const NoGradient no_grad{{"", "MelWeightMatrix", 17, kMaxOpset}};

}  // namespace
}  // namespace kiln

// Gradient rule of LayerNormalization (kernels/cpu/layer_norm.cpp) through
// ai.kiln.LayerNormalizationGrad (kernels/cpu/layer_norm_grad.cpp), which reuses the forward's
// Mean / InvStdDev outputs when the node has them and takes the gradients flowing into them.
#include "autodiff/registry.h"

namespace kiln {
namespace {

std::string output_or_empty(GradContext& g, size_t i) {
  return i < g.num_outputs() && !g.node.outputs[i].empty() ? g.O(i) : "";
}

void layer_norm_grad(GradContext& g) {
  const std::string mean = output_or_empty(g, 1), inv = output_or_empty(g, 2);
  const bool both = !mean.empty() && !inv.empty();
  std::vector<std::string> in{g.GO_or_zeros(0), g.I(0),  g.I(1),  both ? mean : "",
                              both ? inv : "",  g.GO(1), g.GO(2), g.has_input(2) ? g.I(2) : ""};
  while (!in.empty() && in.back().empty()) in.pop_back();
  const auto outs = g.emit_multi(kKilnDomain, "LayerNormalizationGrad", in, 3,
                                 {{"axis", Attribute::of_int(g.node.attr_int("axis", -1))},
                                  {"epsilon", Attribute::of_float(g.node.attr_float("epsilon", 1e-5f))}});
  g.set_GI(0, outs[0]);
  if (!g.GO(0).empty()) {
    g.set_GI(1, outs[1]);
    g.set_GI(2, outs[2]);
  }
}

const GradientRegistrar r_layer_norm({"", "LayerNormalization", 1, kMaxOpset}, layer_norm_grad);

}  // namespace
}  // namespace kiln

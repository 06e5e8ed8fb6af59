// Gradient rule of ai.kiln.Attention (kernels/cpu/attention_fused.cpp), the node the attention
// fusion (ir/fusion.h) writes before the backward is built: one ai.kiln.AttentionGrad pass, whose
// full-batch gradients are summed back over the dims each input broadcast. The mask gets none; the
// bias gets the scores' gradient (AttentionGrad's fourth output) only when it needs one. The
// forward's second output, the probabilities when it keeps them, goes to AttentionGrad as P. The
// perm attributes (the operands' layouts) go with it.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void attention_grad(GradContext& g) {
  if (g.GO(0).empty()) return;
  const bool bias = g.has_input(4) && g.needs(4);
  const bool kept = g.num_outputs() > 1 && !g.node.outputs[1].empty();
  std::vector<std::string> in{
      g.GO(0), g.I(0), g.I(1), g.I(2), g.has_input(3) ? g.I(3) : "", g.has_input(4) ? g.I(4) : "", kept ? g.O(1) : ""};
  while (in.back().empty()) in.pop_back();
  std::map<std::string, Attribute> attrs{{"scale", Attribute::of_float(g.node.attr_float("scale", 1.f))},
                                         {"fill", Attribute::of_float(g.node.attr_float("fill", 0.f))},
                                         {"fill_where", Attribute::of_int(g.node.attr_int("fill_where", 1))},
                                         {"block_rows", Attribute::of_int(g.node.attr_int("block_rows", 0))}};
  // The operands' layouts: dY arrives in Y's, and dQ, dKt, dV leave in their operands' own.
  for (const char* perm : {"perm_q", "perm_kt", "perm_v", "perm_y"})
    if (g.node.has_attr(perm)) attrs[perm] = g.node.attrs.at(perm);
  const auto outs = g.emit_multi(kKilnDomain, "AttentionGrad", in, bias ? 4 : 3, attrs);
  for (size_t i = 0; i < 3; ++i)
    if (g.needs(i)) g.set_GI(i, outs[i], Broadcast::Maybe);
  if (bias) g.set_GI(4, outs[3], Broadcast::Maybe);
}

const GradientRegistrar r_attention({kKilnDomain, "Attention", 1, kMaxOpset}, attention_grad);

}  // namespace
}  // namespace kiln

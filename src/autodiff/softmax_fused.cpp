// Gradient rule of ai.kiln.MaskedSoftmax (kernels/cpu/softmax_fused.cpp), the node the masked-softmax
// fusion (ir/fusion.h) writes before the backward is built.
#include "autodiff/registry.h"

namespace kiln {
namespace {

// One ai.kiln.MaskedSoftmaxGrad pass, summed back over the dims X broadcast; cond gets none.
void masked_softmax_grad(GradContext& g) {
  if (!g.needs(0)) return;
  g.set_GI(0,
           g.emit(kKilnDomain, "MaskedSoftmaxGrad", {g.GO(0), g.O(0), g.I(1)},
                  {{"scale", Attribute::of_float(g.node.attr_float("scale", 1.f))},
                   {"fill_where", Attribute::of_int(g.node.attr_int("fill_where", 1))}}),
           Broadcast::Maybe);
}

const GradientRegistrar r_masked_softmax({kKilnDomain, "MaskedSoftmax", 1, kMaxOpset}, masked_softmax_grad);

}  // namespace
}  // namespace kiln

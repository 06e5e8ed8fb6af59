// Gradient rule of ai.kiln.LinearCrossEntropy (kernels/cpu/linear_loss_fused.cpp), the node the
// LM-head serialization (training/serialized_head.cpp) writes: one ai.kiln.LinearCrossEntropyGrad
// pass over the vocabulary's blocks, reading the forward's lse (its second output). The labels get
// no gradient; lse is the forward's own and is not differentiated.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void linear_cross_entropy_grad(GradContext& g) {
  if (g.GO(0).empty() || (!g.needs(0) && !g.needs(1))) return;
  if (g.num_outputs() < 2 || g.node.outputs[1].empty())
    throw InvalidModel(g.node.label() + ": its gradient reads the forward's lse; name its second output");
  std::map<std::string, Attribute> attrs;
  for (const char* key : {"chunks", "trans_b", "ignore_index", "reduction"})
    if (const auto it = g.node.attrs.find(key); it != g.node.attrs.end()) attrs.emplace(key, it->second);
  const auto outs =
      g.emit_multi(kKilnDomain, "LinearCrossEntropyGrad", {g.GO(0), g.I(0), g.I(1), g.I(2), g.O(1)}, 2, attrs);
  if (g.needs(0)) g.set_GI(0, outs[0]);
  if (g.needs(1)) g.set_GI(1, outs[1]);
}

const GradientRegistrar r({kKilnDomain, "LinearCrossEntropy", 1, kMaxOpset}, linear_cross_entropy_grad);

}  // namespace
}  // namespace kiln

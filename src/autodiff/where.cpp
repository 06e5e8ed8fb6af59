// Gradient rule of Where (kernels/cpu/where.cpp): the output gradient goes to X where the condition
// holds and to Y elsewhere; the builder sums each back over the dims X or Y broadcast. The boolean
// condition gets none.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void where_grad(GradContext& g) {
  const std::string zero = g.scalar_like(0.0, g.O(0));
  if (g.needs(1)) g.set_GI(1, g.emit("Where", {g.I(0), g.GO(0), zero}), Broadcast::Maybe);
  if (g.needs(2)) g.set_GI(2, g.emit("Where", {g.I(0), zero, g.GO(0)}), Broadcast::Maybe);
}

const GradientRegistrar r_where({"", "Where", 1, kMaxOpset}, where_grad);

}  // namespace
}  // namespace kiln

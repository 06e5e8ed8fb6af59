// Gradient rule of CumSum (kernels/cpu/cumsum.cpp): each input element feeds the outputs after it
// (or before it, reversed), so its gradient is the cumulative sum of the output gradient run the
// other way, with the same exclusiveness. The axis input gets none.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void cumsum_grad(GradContext& g) {
  const int64_t exclusive = g.node.attr_int("exclusive", 0);
  const int64_t reverse = g.node.attr_int("reverse", 0);
  g.set_GI(0,
           g.emit("CumSum", {g.GO(0), g.I(1)},
                  {{"exclusive", Attribute::of_int(exclusive)}, {"reverse", Attribute::of_int(reverse != 0 ? 0 : 1)}}));
}

const GradientRegistrar r_cumsum({"", "CumSum", 1, kMaxOpset}, cumsum_grad);

}  // namespace
}  // namespace kiln

// The gradient rule of MaxRoiPool (kernels/cpu/max_roi_pool.cpp): ai.kiln.MaxRoiPoolGrad
// (kernels/cpu/max_roi_pool_grad.cpp) gives X its gradient; the regions, rounded to whole pixels,
// get none (as in torchvision.ops.roi_pool).
#include "autodiff/registry.h"

namespace kiln {
namespace {

void max_roi_pool_grad(GradContext& g) {
  if (!g.needs(0)) return;
  g.set_GI(0, g.emit(kKilnDomain, "MaxRoiPoolGrad", {g.GO_or_zeros(0), g.I(0), g.I(1)}, g.node.attrs));
}

const GradientRegistrar r_max_roi_pool({"", "MaxRoiPool", 1, kMaxOpset}, max_roi_pool_grad);

}  // namespace
}  // namespace kiln

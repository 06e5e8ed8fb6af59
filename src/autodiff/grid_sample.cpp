// The gradient rule of GridSample (kernels/cpu/grid_sample.cpp): one ai.kiln.GridSampleGrad node
// (kernels/cpu/grid_sample_grad.cpp) gives X and the grid their gradients.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void grid_sample_grad(GradContext& g) {
  const std::vector<std::string> d =
      g.emit_multi(kKilnDomain, "GridSampleGrad", {g.GO_or_zeros(0), g.I(0), g.I(1)}, 2, g.node.attrs);
  if (g.needs(0)) g.set_GI(0, d[0]);
  if (g.needs(1)) g.set_GI(1, d[1]);
}

const GradientRegistrar r_grid_sample({"", "GridSample", 16, kMaxOpset}, grid_sample_grad);

}  // namespace
}  // namespace kiln

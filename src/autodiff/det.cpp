// The gradient rule of Det (kernels/cpu/det.cpp): ai.kiln.DetGrad (kernels/cpu/det_grad.cpp).
#include "autodiff/registry.h"

namespace kiln {
namespace {

void det_grad(GradContext& g) { g.set_GI(0, g.emit(kKilnDomain, "DetGrad", {g.GO_or_zeros(0), g.I(0)})); }

const GradientRegistrar r_det({"", "Det", 11, kMaxOpset}, det_grad);

}  // namespace
}  // namespace kiln

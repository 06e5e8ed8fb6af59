// ai.kiln.StopGradient (kernels/cpu/shape_grad.cpp) is torch's detach(): no gradient goes back
// through it.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient none({{kKilnDomain, "StopGradient", 1, kMaxOpset}});

}  // namespace
}  // namespace kiln

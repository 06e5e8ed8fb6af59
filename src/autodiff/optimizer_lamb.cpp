// ai.kiln.LambStep (kernels/cpu/optimizer_lamb.cpp) consumes gradients and produces the next
// training state; no loss is differentiated through it.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient none({{kKilnDomain, "LambStep", 1, kMaxOpset}});

}  // namespace
}  // namespace kiln

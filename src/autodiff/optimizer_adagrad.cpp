// ai.kiln.AdagradStep (kernels/cpu/optimizer_adagrad.cpp) consumes gradients and produces the next
// training state; no loss is differentiated through it.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient none({{kKilnDomain, "AdagradStep", 1, kMaxOpset}});

}  // namespace
}  // namespace kiln

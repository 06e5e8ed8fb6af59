// ai.kiln.AdafactorStep (kernels/cpu/optimizer_adafactor.cpp) consumes gradients and produces the
// next training state; no loss is differentiated through it.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient none({{kKilnDomain, "AdafactorStep", 1, kMaxOpset}});

}  // namespace
}  // namespace kiln

// Kiln's optimizer steps (kernels/cpu/optimizer_kiln.cpp) consume gradients and produce the next
// training state; no loss is differentiated through them.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient none({{kKilnDomain, "AdamWStep", 1, kMaxOpset}, {kKilnDomain, "SGDStep", 1, kMaxOpset}});

}  // namespace
}  // namespace kiln

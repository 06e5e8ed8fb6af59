// Gradient rule of Unique (kernels/cpu/unique.cpp): none, as torch.unique has none (its outputs are
// picked values and integer positions).
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient none({{"", "Unique", 11, kMaxOpset}});

}  // namespace
}  // namespace kiln

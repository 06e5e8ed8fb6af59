// NonMaxSuppression (kernels/cpu/non_max_suppression.cpp) outputs indices: no gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient no_grad{{"", "NonMaxSuppression", 10, kMaxOpset}};

}  // namespace
}  // namespace kiln

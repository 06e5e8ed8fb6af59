// Constant and ConstantOfShape (kernels/cpu/constant.cpp) produce constants: no gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient none({{"", "Constant", 1, kMaxOpset}, {"", "ConstantOfShape", 1, kMaxOpset}});

}  // namespace
}  // namespace kiln

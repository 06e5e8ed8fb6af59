// ArgMax and ArgMin (kernels/cpu/argreduce.cpp) produce indices: no gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient none({{"", "ArgMax", 1, kMaxOpset}, {"", "ArgMin", 1, kMaxOpset}});

}  // namespace
}  // namespace kiln

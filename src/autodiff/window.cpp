// Gradient rules of the window functions (kernels/cpu/window.cpp): their one input is an integer
// length, so nothing upstream gets a gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient none({{"", "HannWindow", 17, kMaxOpset},
                       {"", "HammingWindow", 17, kMaxOpset},
                       {"", "BlackmanWindow", 17, kMaxOpset}});

}  // namespace
}  // namespace kiln

// ConvInteger and QLinearConv (kernels/cpu/quantize_conv.cpp) compute integer outputs from
// integer inputs: no gradients.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient no_grad{{"", "ConvInteger", 10, kMaxOpset}, {"", "QLinearConv", 10, kMaxOpset}};

}  // namespace
}  // namespace kiln

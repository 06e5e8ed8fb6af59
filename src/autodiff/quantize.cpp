// Linear quantization (kernels/cpu/quantize.cpp) has no gradients: the quantized outputs are
// integers, and a dequantized value's only float inputs are its scales, which ONNX Runtime does not
// train either (quantization-aware training fakes the rounding with float ops instead).
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient no_grad{{"", "QuantizeLinear", 10, kMaxOpset},
                         {"", "DequantizeLinear", 10, kMaxOpset},
                         {"", "DynamicQuantizeLinear", 11, kMaxOpset},
                         {"", "MatMulInteger", 10, kMaxOpset},
                         {"", "QLinearMatMul", 10, kMaxOpset}};

}  // namespace
}  // namespace kiln

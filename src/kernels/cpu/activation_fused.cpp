// Activations that Kiln's fusion passes (ir/fusion.h) write in place of the chains of standard ops
// that exporters emit for them: ai.kiln.Gelu, the one-node Gelu of models whose opset predates
// ONNX's own (opset 20). Its kernel is Gelu's (gelu_common.h).
#include "kernels/cpu/gelu_common.h"

namespace kiln {
namespace {

const KernelRegistrar reg_gelu({kKilnDomain, "Gelu", 1, kMaxOpset, gelu::GeluOp::Types::dtypes(), 0, {}},
                               [](const Node& n) { return std::make_unique<UnaryKernel<gelu::GeluOp>>(n); });
const OpDocRegistrar doc_gelu(
    {kKilnDomain,
     "Gelu",
     "ONNX's Gelu (opset 20) for earlier opsets: what the Gelu fusion writes for the standard-op chain "
     "x/2 (1 + erf(x/sqrt 2)) or its tanh approximation.",
     {"X: a float tensor"},
     {"Y: X's shape and dtype"},
     "approximate \"none\": Y = X/2 (1 + erf(X/sqrt 2)); \"tanh\": Y = X/2 (1 + tanh(sqrt(2/pi) (X + 0.044715 X^3)))"});

}  // namespace
}  // namespace kiln

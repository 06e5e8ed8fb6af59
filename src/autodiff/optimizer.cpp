// Optimizer steps (kernels/cpu/optimizer_kiln.cpp, optimizer_onnx.cpp) consume gradients and
// produce the next training state; no loss is differentiated through them.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const NoGradient none({{kKilnDomain, "AdamWStep"},
                       {kKilnDomain, "SGDStep"},
                       {"ai.onnx.preview.training", "Adam"},
                       {"ai.onnx.preview.training", "Momentum"},
                       {"ai.onnx.preview.training", "Adagrad"}});

}  // namespace
}  // namespace kiln

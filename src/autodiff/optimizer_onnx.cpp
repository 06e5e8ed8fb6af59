// ONNX's training-domain optimizers (kernels/cpu/optimizer_onnx.cpp) consume gradients and produce
// the next training state; no loss is differentiated through them.
#include "autodiff/registry.h"

namespace kiln {
namespace {

const std::string kTrainingDomain = "ai.onnx.preview.training";

const NoGradient none({{kTrainingDomain, "Adam", 1, kMaxOpset},
                       {kTrainingDomain, "Momentum", 1, kMaxOpset},
                       {kTrainingDomain, "Adagrad", 1, kMaxOpset}});

}  // namespace
}  // namespace kiln

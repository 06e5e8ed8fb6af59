// Built-in models by name, built with Kiln's GraphBuilder as ONNX (torch.nn's default
// initialisation, seeded): what `kiln train --model NAME` and ModelSource::builtin train.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/graph.h"

namespace kiln {

// "mlp": Flatten -> Linear(784, 128) -> ReLU -> Linear(128, 10), on images [N, 1, 28, 28].
// "lenet": LeNet-5 with BatchNorm (training mode) after each convolution, on [N, 1, 28, 28].
// Both output "logits" [N, 10]. InvalidArgument listing the names for an unknown one.
Model make_builtin_model(const std::string& name, uint64_t seed);
std::vector<std::string> builtin_model_names();

}  // namespace kiln

// Built-in models by name: the model zoo's entries (include/kiln/nn/zoo.h), exported as trainable
// ONNX (training mode, torch.nn's initialisation from the seed): what `kiln train --model NAME`
// and ModelSource::builtin train.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/graph.h"

namespace kiln {

// "mlp": Flatten -> Linear(784, 128) -> ReLU -> Linear(128, 10), on images [N, 1, 28, 28].
// "lenet": LeNet-5 with BatchNorm (training mode) after each convolution, on [N, 1, 28, 28].
// "resnet18", "convnext_tiny", ...: every zoo entry, `config` overriding its defaults (e.g.
// {"num_channels": 1, "num_labels": 10}). Output "logits". An image model's "pixel_values" input is
// named "input" here, the image column of Kiln's datasets. InvalidArgument listing the names for
// an unknown one, or naming an unknown config key.
Model make_builtin_model(const std::string& name, uint64_t seed,
                         const nlohmann::json& config = nlohmann::json::object());
std::vector<std::string> builtin_model_names();

}  // namespace kiln

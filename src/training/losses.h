// The loss blocks generate_artifacts appends to a forward model, one per LossType, each with
// PyTorch's default semantics (mean reduction; CrossEntropyLoss with ignore_index -100). A block
// reads the model outputs it is given and a new graph input "labels", and returns the scalar loss.
#pragma once

#include <string>
#include <vector>

#include "ir/graph_editor.h"
#include "kiln/artifacts.h"

namespace kiln::training {

inline const std::string kLabelsInput = "labels";

// Adds the loss for `outputs` (model outputs) and returns the loss value's name. Throws
// InvalidArgument when the loss does not fit the outputs (count, dtype, rank).
std::string add_loss(LossType loss, Model& model, GraphEditor& edit, const std::vector<std::string>& outputs,
                     float label_smoothing = 0.0f);

}  // namespace kiln::training

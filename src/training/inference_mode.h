// The eval model and the exported inference model run training-mode ops in inference mode.
#pragma once

#include "kiln/graph.h"

namespace kiln::training {

// BatchNormalization in training mode normalises with the stored statistics instead, and its
// running-statistics outputs go; Dropout stops dropping (its training_mode input is omitted);
// ai.kiln.StopGradient becomes an Identity.
// Throws InvalidModel when a removed output is read by another node.
void to_inference_mode(Graph& g);

}  // namespace kiln::training

// What artifacts.cpp shares with the pipeline's stage artifacts (pipeline_artifacts.cpp).
#pragma once

#include <string>
#include <vector>

#include "kiln/artifacts.h"

namespace kiln::training {

// The forward model with the options' loss block appended, its outputs the loss then the
// additional outputs, shapes inferred.
struct LossModel {
  Model model;
  std::string loss;
};
LossModel forward_with_loss(const Model& forward, const ArtifactOptions& options);

// The frozen parameters the options (or the model's kiln.frozen_params metadata) name.
std::vector<std::string> frozen_parameters(const Model& m, const ArtifactOptions& o);

}  // namespace kiln::training

// The tiny model and dataset the Trainer-based fuzz pieces share (trainer_checkpoint_fuzz.cpp and
// kiln-fuzz-seeds): an MLP 6 -> 4 -> 3 on n seeded examples of "input" [6] and "labels" (3 classes).
#pragma once

#include <cstdint>
#include <memory>

#include "kiln/data.h"
#include "kiln/trainer.h"

namespace kiln::fuzz {

std::shared_ptr<data::TensorDataset> tiny_dataset(int64_t n, uint64_t seed);
trainer::ModelSource tiny_mlp();

}  // namespace kiln::fuzz

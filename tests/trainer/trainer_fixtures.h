// Small models and datasets the Trainer tests share.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "kiln/data.h"
#include "kiln/training_args.h"

namespace kiln::trainer::testing {

// An empty folder under this test process's temporary root (removed when the process ends).
std::filesystem::path fresh(const std::string& name);
// x[N, 6] -> Linear(6, 16) -> ReLU -> [Dropout(0.25, training)] -> Linear(16, 3), saved as
// dir/net.onnx: dropout makes exact resume depend on replaying the masks.
std::filesystem::path write_model(const std::filesystem::path& dir, bool dropout);
// n examples of "input" [6] and "labels" (3 classes from a linear score), seeded.
std::shared_ptr<data::TensorDataset> dataset(int64_t n, uint64_t seed);

// lr 0.01, a log every step, no saving, no reporting.
TrainingArguments base_args(const std::filesystem::path& out);

}  // namespace kiln::trainer::testing

// optimum-graphcore's pad_on_batch_axis: a short batch padded to the full batch size so that every
// step has one shape (one plan), with padded rows that count for nothing. Their labels are -100,
// which CrossEntropyLoss ignores (its mean runs over the other rows), so the loss and the gradients
// equal the unpadded batch's; their inputs repeat the batch's last row, so they stay valid inputs
// (token ids in range). Predictions keep only the real rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/data.h"
#include "kiln/graph.h"
#include "kiln/tensor.h"
#include "kiln/training_args.h"

namespace kiln::trainer {

// Pads every column of `batch` to `batch_size` rows and returns the real rows (the batch's own
// size; batch_size when it is full). Unsupported for a label column that is not integer.
int64_t pad_batch(data::Example& batch, int64_t batch_size, const std::vector<std::string>& label_columns);

// Whether a training model masks padded rows out: its loss is a SoftmaxCrossEntropyLoss or
// NegativeLogLikelihoodLoss with ignore_index -100 over a label column, and no BatchNormalization
// mixes the rows in its batch statistics. Unsupported naming what stands in the way.
void check_padding_is_masked(const Model& training_model, const std::vector<std::string>& label_columns);

// The columns that hold labels: label_names, else "labels".
std::vector<std::string> label_columns(const TrainingArguments& args);

// The first `rows` rows of `t` (a copy; `t` itself when it has no more).
Tensor first_rows(const Tensor& t, int64_t rows);

}  // namespace kiln::trainer

// Predictions and labels of an evaluation's batches as one tensor (HF's nested_concat).
#pragma once

#include <vector>

#include "kiln/tensor.h"

namespace kiln::trainer {

// HF's padding value for gathered predictions and labels of different lengths.
inline constexpr double kGatherPadding = -100.0;

// The parts one after another along dim 0. Parts whose other axes differ (batches padded to their
// own longest item) are padded at the end of each axis to the largest size with `padding` (-100
// for numbers, as HF's nested_concat; true for bool). TypeError for mixed dtypes, ShapeError for
// mixed ranks or a scalar part. No parts: an undefined tensor.
Tensor concat_padded(const std::vector<Tensor>& parts, double padding = kGatherPadding);

}  // namespace kiln::trainer

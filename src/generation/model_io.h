// What the generation models share: rows of ids as an int64 tensor, and the last position's
// logits of each row.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::generation::detail {

// rows[:, from : from + width] as an int64 [N, width] tensor.
Tensor rows_tensor(const std::vector<std::vector<int64_t>>& rows, size_t from, size_t width);
// logits [N, S, V] (float32) -> [N, V] at position S - 1; ShapeError / Unsupported naming `what`.
Tensor last_position(const Tensor& logits, int64_t rows, const char* what);

}  // namespace kiln::generation::detail

// Reading the values of integer inputs (indices, starts/ends/axes/steps, shapes), with a TypeError
// naming the input when its dtype (or rank) is not one ONNX allows; and where an index sat, for
// the messages about out-of-range indices.
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln {

// The values of an int32/int64 input, exactly (INT64_MAX sentinels included); `what` names the
// input in the TypeError for any other dtype.
inline std::vector<int64_t> int_values(const Tensor& t, const char* what) {
  if (t.dtype() != DType::Int64 && t.dtype() != DType::Int32)
    throw TypeError(fmt::format("{} must be int64 or int32, got {}", what, t.describe()));
  return t.to_int64_vector();
}

// The values of an int64 shape-like input (a shape, new_shape, repeats, pads, axes), which must be
// 1-D int64; `what` names it in the TypeError otherwise.
inline std::vector<int64_t> int64_values(const Tensor& t, const char* what) {
  if (t.dtype() != DType::Int64 || t.rank() != 1)
    throw TypeError(fmt::format("{} must be a 1-D int64 tensor, got {}", what, t.describe()));
  return t.to_int64_vector();
}

// "[1, 0]": the position of flat element `i` of an indices tensor of `shape`, for the messages
// that name an out-of-range index.
inline std::string index_position(int64_t i, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
  return to_string(idx);
}

}  // namespace kiln

// Tensors in and out of the generation models (generation/model_io.h).
#include "generation/model_io.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "kiln/error.h"

namespace kiln::generation::detail {

Tensor rows_tensor(const std::vector<std::vector<int64_t>>& rows, size_t from, size_t width) {
  Tensor t = Tensor::empty(DType::Int64, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(width)});
  int64_t* p = t.data<int64_t>();
  for (const auto& r : rows) {
    const auto begin = r.begin() + static_cast<std::ptrdiff_t>(from);
    p = std::copy(begin, begin + static_cast<std::ptrdiff_t>(width), p);
  }
  return t;
}

Tensor last_position(const Tensor& logits, int64_t rows, const char* what) {
  if (logits.shape().size() != 3 || logits.shape()[0] != rows)
    throw ShapeError(
        fmt::format("{}: logits must be [batch {}, sequence, vocab], got {}", what, rows, to_string(logits.shape())));
  if (logits.dtype() != DType::Float32)
    throw Unsupported(
        fmt::format("{}: logits of {} (generation reads float32 logits)", what, dtype_name(logits.dtype())));
  const int64_t s = logits.shape()[1], v = logits.shape()[2];
  Tensor out = Tensor::empty(DType::Float32, {rows, v});
  const Tensor l = logits.contiguous();
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data<float>() + r * v, l.data<float>() + (r * s + s - 1) * v,
                static_cast<size_t>(v) * sizeof(float));
  return out;
}

}  // namespace kiln::generation::detail

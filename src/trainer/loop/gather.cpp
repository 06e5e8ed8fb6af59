#include "trainer/loop/gather.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "kiln/error.h"

namespace kiln::trainer {

namespace {

// Copies `part` (contiguous) into rows [row0, row0 + part.dim(0)) of `out`, whose trailing axes are
// at least as large; the rest of those rows keeps its padding. One memcpy per run of the last axis.
void copy_rows(const Tensor& part, Tensor& out, int64_t row0) {
  const Shape& in = part.shape();
  const size_t rank = in.size();
  const auto elem = static_cast<int64_t>(dtype_size(part.dtype()));
  const auto* src = static_cast<const char*>(part.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  if (rank == 1) {
    std::memcpy(dst + row0 * elem, src, static_cast<size_t>(part.numel() * elem));
    return;
  }
  std::vector<int64_t> to_strides(rank, 1);
  for (size_t a = rank - 1; a-- > 0;) to_strides[a] = to_strides[a + 1] * out.dim(a + 1);
  const int64_t run = in[rank - 1];
  const int64_t runs = part.numel() / std::max<int64_t>(run, 1);
  std::vector<int64_t> index(rank - 1, 0);  // over the axes before the last
  for (int64_t r = 0; r < runs; ++r) {
    int64_t offset = row0 * to_strides[0];
    for (size_t a = 0; a + 1 < rank; ++a) offset += index[a] * to_strides[a];
    std::memcpy(dst + offset * elem, src + r * run * elem, static_cast<size_t>(run * elem));
    for (size_t a = rank - 1; a-- > 0;) {
      if (++index[a] < in[a]) break;
      index[a] = 0;
    }
  }
}

}  // namespace

Tensor concat_padded(const std::vector<Tensor>& parts, double padding) {
  if (parts.empty()) return Tensor();
  const Tensor& first = parts.front();
  Shape shape = first.shape();
  if (shape.empty()) throw ShapeError(fmt::format("cannot gather scalar batches ({})", first.describe()));
  int64_t rows = 0;
  bool ragged = false;
  for (const Tensor& t : parts) {
    if (t.dtype() != first.dtype())
      throw TypeError(fmt::format("cannot gather batches of {} and {}", first.describe(), t.describe()));
    if (t.rank() != first.rank())
      throw ShapeError(
          fmt::format("cannot gather batches of {} and {} (ranks differ)", first.describe(), t.describe()));
    rows += t.dim(0);
    for (size_t a = 1; a < shape.size(); ++a) {
      ragged = ragged || t.dim(a) != shape[a];
      shape[a] = std::max(shape[a], t.dim(a));
    }
  }
  shape[0] = rows;
  Tensor out = Tensor::empty(first.dtype(), shape);
  if (ragged) {
    visit_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T value = from_double<T>(padding);
      std::fill_n(static_cast<T*>(out.raw_data()), out.numel(), value);
    });
  }
  int64_t row = 0;
  for (const Tensor& t : parts) {
    if (t.numel() > 0) copy_rows(t.contiguous(), out, row);
    row += t.dim(0);
  }
  return out;
}

}  // namespace kiln::trainer

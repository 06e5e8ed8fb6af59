#include "kiln/shape.h"

#include <fmt/format.h>

#include "kiln/error.h"

namespace kiln {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

std::string to_string(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& what) {
  const int64_t lo = rank == 0 ? -1 : -rank;
  const int64_t hi = rank == 0 ? 0 : rank - 1;
  if (axis < lo || axis > hi)
    throw ShapeError(fmt::format("{} {} is out of range for rank {} (valid: {}..{})", what, axis, rank, lo, hi));
  return axis < 0 ? axis + std::max<int64_t>(rank, 1) : axis;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      throw ShapeError(fmt::format("shapes {} and {} cannot be broadcast (dimension {}: {} vs {})", to_string(a),
                                   to_string(b), i, da, db));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace kiln

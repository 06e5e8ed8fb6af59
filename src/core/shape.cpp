#include "kiln/shape.h"

#include <fmt/format.h>

#include "kiln/error.h"

namespace kiln {

namespace {

[[noreturn]] void too_large(const Shape& shape) {
  throw ShapeError(fmt::format("shape {} has more elements than a 64-bit count holds", to_string(shape)));
}

void check_dims(const Shape& shape) {
  for (int64_t d : shape)
    if (d < 0) throw ShapeError(fmt::format("shape {} has a negative dimension", to_string(shape)));
}

}  // namespace

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
    throw ShapeError(fmt::format("{}: {} * {} is negative or beyond a 64-bit count", what, a, b));
  return r;
}

int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r))
    throw ShapeError(fmt::format("{}: {} + {} is negative or beyond a 64-bit count", what, a, b));
  return r;
}

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) {
      check_dims(shape);
      too_large(shape);
    }
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    if (shape[i] < 0 || __builtin_mul_overflow(acc, shape[i], &acc)) {
      check_dims(shape);
      too_large(shape);
    }
  }
  return s;
}

size_t checked_bytes(const Shape& shape, size_t item_size) {
  const auto n = static_cast<size_t>(numel(shape));
  if (item_size != 0 && n > kMaxTensorBytes / item_size)
    throw ShapeError(fmt::format("a tensor of shape {} would take more than Kiln's limit of {} bytes (2^50)",
                                 to_string(shape), kMaxTensorBytes));
  return n * item_size;
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

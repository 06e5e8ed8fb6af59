// Shapes and strides: plain vectors of int64 (elements, not bytes), row-major by default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

// Sizes computed from untrusted input (model files, feeds, data files, --dim) go through these:
// a negative dimension, a count beyond int64 or a tensor over kMaxTensorBytes throws ShapeError
// instead of wrapping into a small, wrong number.
inline constexpr size_t kMaxTensorBytes = size_t{1} << 50;  // 1 PiB: far above any real tensor,
                                                            // and sums of a few thousand fit size_t
int64_t numel(const Shape& shape);                          // product of dims; 1 for a scalar; checked
Strides contiguous_strides(const Shape& shape);             // row-major element strides; checked
// numel(shape) * item_size, checked against kMaxTensorBytes.
size_t checked_bytes(const Shape& shape, size_t item_size);
// a * b and a + b of non-negative counts, throwing ShapeError naming `what` when they leave int64.
int64_t checked_mul(int64_t a, int64_t b, const char* what);
int64_t checked_add(int64_t a, int64_t b, const char* what);
std::string to_string(const Shape& shape);  // "[2, 3, 4]"
// Normalises a possibly negative axis into [0, rank); throws ShapeError naming `what` if out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& what = "axis");
// Numpy/ONNX multidirectional broadcast of two shapes; throws ShapeError if incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace kiln

// Shapes and strides: plain vectors of int64 (elements, not bytes), row-major by default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t numel(const Shape& shape);               // product of dims; 1 for a scalar
Strides contiguous_strides(const Shape& shape);  // row-major element strides
std::string to_string(const Shape& shape);       // "[2, 3, 4]"
// Normalises a possibly negative axis into [0, rank); throws ShapeError naming `what` if out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& what = "axis");
// Numpy/ONNX multidirectional broadcast of two shapes; throws ShapeError if incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace kiln

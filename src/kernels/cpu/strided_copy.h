// The strided byte copy behind Transpose and Slice (transform.cpp), shared with the ops that are
// strided views too: Expand and Tile (stride 0 repeats), DepthToSpace and SpaceToDepth (permuted
// reshapes).
#pragma once

#include <cstddef>

#include "kiln/shape.h"

namespace kiln {

// Copies the view of `src` with `shape` and element `strides` (any sign, 0 repeats an element)
// into the contiguous buffer `dst`. Elements are `esize` bytes: 1, 2, 4 or 8.
void strided_copy(const void* src, void* dst, const Shape& shape, const Strides& strides, size_t esize);

}  // namespace kiln

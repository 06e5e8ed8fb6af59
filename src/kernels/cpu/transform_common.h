// What the data-movement ops and Slice's gradient (transform.cpp, transform_grad.cpp) share: the
// work split of copies and Slice's normalised starts and steps.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::transform {

// Work per thread chunk: below this many bytes a copy stays on one thread.
inline constexpr int64_t kGrainBytes = 64 * 1024;

inline int64_t grain_for(int64_t bytes_per_item) {
  return std::max<int64_t>(1, kGrainBytes / std::max<int64_t>(1, bytes_per_item));
}

// Where a slice of a tensor of shape `in` starts and how it steps, per dimension, and its shape.
struct SliceSpec {
  std::vector<int64_t> start, step;
  Shape out;
};

// Reads starts, ends, axes and steps from inputs `first`.. (or, before opset 10, from attributes).
SliceSpec slice_spec(const Node& node, const InferContext& ctx, const Shape& s, size_t first, bool from_inputs);

}  // namespace kiln::transform

// What the indexing ops and their gradients (scatter.cpp, scatter_grad.cpp) share: checked index
// offsets for GatherElements / ScatterElements, and index tuples for GatherND / ScatterND. Every
// index is checked against its dimension (negative ones count from the end); an out-of-range index
// is an InvalidArgument naming where it sat in `indices`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/kernel.h"
#include "kiln/tensor.h"

namespace kiln::indexing {

// TypeError unless `m` is int32 or int64; `what` names the input.
void check_index_dtype(const TensorMeta& m, const char* what);

// The data offsets (in elements) that each element of `indices` addresses along `axis`, for
// GatherElements and ScatterElements: offset of the same position in data with the axis replaced.
std::vector<int64_t> element_offsets(const Tensor& indices, const Shape& data_shape, int64_t axis,
                                     const std::string& target);

// Validates the shared shape rules of GatherElements and ScatterElements: equal ranks and, off
// the axis, indices no larger than data (so every position exists in data).
int64_t elements_axis(const Node& node, const Shape& data, const Shape& indices, const char* indices_name);

// GatherND and ScatterND address slices of data by index tuples in the last dimension of indices.
// Both reduce to: for each tuple t (after the batch dims), a data offset of a slice of `slice`
// elements. `Tuples` computes and checks those offsets once.
struct Tuples {
  int64_t batch = 1;             // product of the batch dims
  int64_t per_batch = 0;         // tuples in one batch
  int64_t slice = 1;             // elements addressed by one tuple
  int64_t batch_stride = 0;      // elements of data in one batch
  std::vector<int64_t> offsets;  // per tuple, within its batch
};

// The offsets of the index tuples of `indices` (int64, last dim k) into `data`.
Tuples index_tuples(const Tensor& indices, const Shape& data, int64_t batch_dims);

// Shape checks shared by GatherND and ScatterND; returns the tuple length k.
int64_t tuple_length(const Shape& data, const Shape& indices, int64_t batch_dims);

}  // namespace kiln::indexing

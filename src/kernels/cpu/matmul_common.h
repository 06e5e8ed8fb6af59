// What matmul.cpp shares with matmul_grad.cpp: the float MatMul kernels, which also run
// ai.kiln.FusedMatMul (their transA / transB attributes read an operand transposed in place).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "kiln/kernel.h"

namespace kiln {

// A MatMul's operands seen as (batches of) matrices.
struct MatMulShape {
  Shape a_batch, b_batch;  // left-padded with 1s to the rank of `batch`
  Shape batch;             // broadcast batch dims of the output
  int64_t m = 0, k = 0, n = 0;
  Shape out;
  // B is one matrix for every batch: A's batch folds into M and one 2-D product does it all.
  bool b_single() const { return numel(b_batch) == 1; }
};

// Reads MatMul's operand shapes (numpy semantics); ShapeError naming `op` when they do not multiply.
MatMulShape matmul_shape(const TensorMeta& a, const TensorMeta& b, const char* op = "MatMul");

// For each output batch (row-major), the indices of the A and B matrices it multiplies.
std::vector<std::pair<int64_t, int64_t>> batch_pairs(const MatMulShape& s);

// The float32 or native bfloat16 (oneDNN) or float64 (OpenBLAS) MatMul kernel for `node`, honouring
// transA/transB.
std::unique_ptr<Kernel> make_float_matmul(const Node& node, DType dtype);

}  // namespace kiln

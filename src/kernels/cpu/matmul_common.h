// What matmul.cpp shares with matmul_grad.cpp: the float MatMul kernels, which also run
// ai.kiln.FusedMatMul (their transA / transB attributes read an operand transposed in place).
#pragma once

#include <memory>

#include "kiln/kernel.h"

namespace kiln {

// The float32 or native bfloat16 (oneDNN) or float64 (OpenBLAS) MatMul kernel for `node`, honouring
// transA/transB.
std::unique_ptr<Kernel> make_float_matmul(const Node& node, DType dtype);

}  // namespace kiln

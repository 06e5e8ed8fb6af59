// bfloat16 kernels that compute in float32: mixed precision's products (MatMul, Gemm, Conv,
// attention and their gradients) on CPUs without native bfloat16 arithmetic. Each bfloat16 input is
// widened to float32 (exact: a bfloat16 is the top half of a float32), the op's float32 kernel runs
// (products of bfloat16 values are exact in float32, and sums accumulate in float32), and each
// float32 output is rounded to bfloat16 (nearest even). The result is what a bfloat16 dot-product
// unit with float32 accumulation gives, up to the order of the additions.
//
//   const KernelRegistrar matmul_bf16({"", "MatMul", 1, kMaxOpset, {DType::BFloat16}},
//                                     bf16_via_float32(make<MatMulF32>));
#pragma once

#include <functional>
#include <memory>

#include "kiln/kernel.h"

namespace kiln {

using KernelFactory = std::function<std::unique_ptr<Kernel>(const Node&)>;

// A factory of bfloat16 kernels around the float32 kernels that `float32` makes. Inputs of other
// dtypes (indices, masks, float32 inputs) pass through unchanged.
KernelFactory bf16_via_float32(KernelFactory float32);

}  // namespace kiln

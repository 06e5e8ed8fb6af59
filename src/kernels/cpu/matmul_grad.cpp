// ai.kiln.FusedMatMul: MatMul with either operand read transposed in place. The gradient rules of
// MatMul and FusedMatMul (autodiff/matmul.cpp, autodiff/matmul_grad.cpp) emit it for dA = dY @ B^T
// and dB = A^T @ dY, which would otherwise copy B^T and A^T through Transpose nodes. The kernels
// are MatMul's own (matmul.cpp).
#include "kernels/cpu/low_precision.h"
#include "kernels/cpu/matmul_common.h"
#include "kiln/graph.h"

namespace kiln {
namespace {

const KernelRegistrar fused_matmul_f32({kKilnDomain, "FusedMatMul", 1, kMaxOpset, {DType::Float32}},
                                       [](const Node& n) { return make_float_matmul(n, DType::Float32); });
const KernelRegistrar fused_matmul_f64({kKilnDomain, "FusedMatMul", 1, kMaxOpset, {DType::Float64}},
                                       [](const Node& n) { return make_float_matmul(n, DType::Float64); });
std::unique_ptr<Kernel> make_f32(const Node& n) { return make_float_matmul(n, DType::Float32); }
const KernelRegistrar fused_matmul_bf16(
    {kKilnDomain, "FusedMatMul", 1, kMaxOpset, {DType::BFloat16}},
    bf16_kernels([](const Node& n) { return make_float_matmul(n, DType::BFloat16); }, make_f32));
const KernelRegistrar fused_matmul_f16({kKilnDomain, "FusedMatMul", 1, kMaxOpset, {DType::Float16}},
                                       via_float32(make_f32));
const OpDocRegistrar fused_matmul_doc(
    {kKilnDomain,
     "FusedMatMul",
     "MatMul with either operand read transposed in place (its last two axes swapped), without the copy a "
     "Transpose makes; the gradient rules of MatMul and FusedMatMul emit it. Attributes: transA (0), transB (0), "
     "and out_dtype (absent: A's dtype; 1, float32, for bfloat16 or float16 operands: the float32 accumulator "
     "written as it is, which Sessions fold mixed precision's result Casts into). A transposed operand must "
     "have rank >= 2; batch dims broadcast as in MatMul.",
     {"A: float32, float64, bfloat16 or float16", "B: A's dtype"},
     {"Y: op(A) @ op(B), in A's dtype or out_dtype"},
     "op(X) = X with its last two axes swapped if its trans flag is set, else X;  Y = MatMul(op(A), op(B))"});

}  // namespace
}  // namespace kiln

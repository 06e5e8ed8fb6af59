// Mixed precision's 16-bit products (MatMul, Gemm, Conv, attention and their gradients).
//
// bfloat16 runs natively in oneDNN where the CPU has bfloat16 instructions (AVX512-BF16, AMX-BF16):
// bf16_native() says so, probing oneDNN once, and bf16_kernels() picks the native kernel or the
// float32 one below when a kernel is made. KILN_BF16=emulate forces the float32 path (the tests
// compare the two); KILN_BF16=native on a CPU without the instructions is an Unsupported error.
//
// Elsewhere, and for float16 always, the kernels compute in float32. Each 16-bit
// input is widened to float32 (exact), the op's float32 kernel runs (products of 16-bit values are
// exact in float32, and sums accumulate in float32), and each float32 output is rounded to the
// inputs' 16-bit type (nearest even). The result is what a 16-bit dot-product unit with float32
// accumulation gives, up to the order of the additions.
//
//   const KernelRegistrar matmul_low({"", "MatMul", 1, kMaxOpset, {DType::BFloat16, DType::Float16}},
//                                    via_float32(make<MatMulF32>));
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "kiln/kernel.h"

namespace kiln {

using KernelFactory = std::function<std::unique_ptr<Kernel>(const Node&)>;

// bfloat16 or float16.
inline bool is_16_bit(DType t) { return t == DType::BFloat16 || t == DType::Float16; }

// The 16-bit dtype a node's attribute out_dtype (an ONNX dtype code) asks its float32 result to be
// rounded to (what ir/fusion.h's fold_16_bit_casts writes); nullopt without the attribute;
// InvalidModel for a dtype other than bfloat16 or float16.
std::optional<DType> rounded_out_dtype(const Node& n);

// n 16-bit values into float32 (exact) and float32 values rounded to 16 bits (nearest even; NaN
// stays NaN, and float16 overflows to infinity, as a float16 unit would), on the calling thread:
// what via_float32 does to whole tensors, for kernels that convert the blocks they work on.
void widen_values(const BFloat16* src, float* dst, int64_t n);
void widen_values(const Half* src, float* dst, int64_t n);
void narrow_values(const float* src, BFloat16* dst, int64_t n);
void narrow_values(const float* src, Half* dst, int64_t n);

// A factory of 16-bit kernels around the float32 kernels that `float32` makes. The 16-bit type is
// that of the node's first bfloat16 or float16 input; inputs of other dtypes (indices, masks,
// float32 inputs) pass through unchanged.
KernelFactory via_float32(KernelFactory float32);

// Whether bfloat16 products run in oneDNN's bfloat16 kernels in this process (see above).
bool bf16_native();
// A factory of bfloat16 kernels: `native` where bf16_native() holds when the kernel is made, else
// via_float32(float32).
KernelFactory bf16_kernels(KernelFactory native, KernelFactory float32);

// A native bfloat16 kernel that has oneDNN bfloat16 implementations for some geometries only
// (convolutions: oneDNN falls back to its reference loops for others). After infer(), supported()
// says whether this node's shapes have one.
class NativeBf16Kernel : public Kernel {
 public:
  using Kernel::Kernel;
  virtual bool supported() = 0;
};
using NativeBf16Factory = std::function<std::unique_ptr<NativeBf16Kernel>(const Node&)>;

// As bf16_kernels, but the native kernel runs only where supported() holds for the planned shapes;
// elsewhere the float32 kernel over widened inputs does.
KernelFactory bf16_kernels_where_supported(NativeBf16Factory native, KernelFactory float32);

}  // namespace kiln

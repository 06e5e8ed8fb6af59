// 16-bit kernels (kernels/cpu/low_precision.h). Emulated (KILN_BF16=emulate, and float16
// always): MatMul, Gemm, Conv and FusedMatMul on bfloat16 and float16 operands give exactly the
// float32 kernel's result on the same values, rounded once to the 16-bit type (both accumulate in
// float32 in the same order). Native (oneDNN's bfloat16 kernels, where the CPU has the
// instructions; MatMul, Gemm, FusedMatMul, Conv, ConvGrad): within one bfloat16 rounding of the
// float64 product of the same values.
#include "kernels/cpu/low_precision.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"
#include "training/training_test_util.h"

namespace kiln {
namespace {

using test_util::Bf16Mode;

using kiln::testing::random_tensor;

Tensor cast(const Tensor& t, DType to) { return test_util::cast_to(t, to); }

Node node_of(const std::string& op, std::vector<std::string> inputs, const std::string& domain = "") {
  Node n;
  n.op_type = op;
  n.domain = domain;
  n.name = op;
  n.inputs = std::move(inputs);
  n.outputs = {"y"};
  return n;
}

// The 16-bit kernel gives the float32 kernel's result on the same (16-bit) values, rounded to the
// 16-bit type: exactly, as both accumulate in float32 in the same order.
void expect_float32_on_rounded(const Node& n, const std::vector<Tensor>& f32_inputs, DType type) {
  std::vector<Tensor> low, rounded;
  for (const Tensor& t : f32_inputs) {
    low.push_back(cast(t, type));
    rounded.push_back(cast(low.back(), DType::Float32));
  }
  const Tensor want = cast(run_node(n, rounded).at(0), type);
  const Tensor got = run_node(n, low).at(0);
  ASSERT_EQ(got.dtype(), type);
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0) << n.op_type << " " << dtype_name(type);
}

void expect_float32_on_rounded(const Node& n, const std::vector<Tensor>& f32_inputs) {
  for (DType type : {DType::BFloat16, DType::Float16}) expect_float32_on_rounded(n, f32_inputs, type);
}

// widen_values / narrow_values (at AVX-512 width where the CPU has it, 16 values a step) give the
// scalar conversions' bits: ties to even, NaN quieted, infinities, subnormals, the largest values
// (rounding up to infinity), at every length around the vector width.
TEST(LowPrecisionKernels, WidenAndNarrowValuesAreTheScalarConversions) {
  std::vector<float> values;
  for (const uint32_t bits :
       {0x00000000u, 0x80000000u, 0x00000001u, 0x007fffffu, 0x00808000u, 0x3f808000u, 0x3f818000u, 0x3f808001u,
        0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffa00000u, 0x3effffffu})
    values.push_back(std::bit_cast<float>(bits));
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> d(-1e3f, 1e3f);
  while (values.size() < 100) values.push_back(d(gen));
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{33}, int64_t{100}}) {
    std::vector<BFloat16> low(static_cast<size_t>(n));
    narrow_values(values.data(), low.data(), n);
    std::vector<float> wide(static_cast<size_t>(n));
    widen_values(low.data(), wide.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      ASSERT_EQ(low[k].bits, float_to_bfloat16(values[k]).bits) << "n " << n << ", element " << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(wide[k]), std::bit_cast<uint32_t>(bfloat16_to_float(low[k]))) << i;
    }
  }
}

TEST(LowPrecisionKernels, ProductsComputeInFloat32On16BitValues) {
  const Bf16Mode emulate("emulate");
  EXPECT_FALSE(bf16_native());
  EXPECT_NE(std::string(bf16_compute_path()).find("emulated"), std::string::npos);
  expect_float32_on_rounded(node_of("MatMul", {"a", "b"}), {random_tensor({2, 5, 7}, 1), random_tensor({7, 3}, 2)});
  Node gemm = node_of("Gemm", {"a", "b", "c"});
  gemm.attrs["transB"] = Attribute::of_int(1);
  expect_float32_on_rounded(gemm, {random_tensor({4, 6}, 3), random_tensor({5, 6}, 4), random_tensor({5}, 5)});
  Node conv = node_of("Conv", {"x", "w", "b"});
  conv.attrs["pads"] = Attribute::of_ints({1, 1, 1, 1});
  expect_float32_on_rounded(conv,
                            {random_tensor({2, 3, 8, 8}, 6), random_tensor({4, 3, 3, 3}, 7), random_tensor({4}, 8)});
  Node fused = node_of("FusedMatMul", {"a", "b"}, kKilnDomain);
  fused.attrs["transB"] = Attribute::of_int(1);
  expect_float32_on_rounded(fused, {random_tensor({3, 4}, 9), random_tensor({5, 4}, 10)});
}

// The native kernel against float64 on the same bfloat16 values: each output within one bfloat16
// rounding (2^-8 relative) of the exact result, plus float32 accumulation's worst-case error:
// k additions of 2^-24 each, under 2^-14 of the sum of |products| for these k <= 257.
void expect_native_close(const Node& n, const std::vector<Tensor>& f32_inputs) {
  std::vector<Tensor> low, wide;
  for (const Tensor& t : f32_inputs) {
    low.push_back(cast(t, DType::BFloat16));
    wide.push_back(cast(cast(low.back(), DType::Float32), DType::Float64));
  }
  std::vector<Tensor> magnitude;  // |inputs| give sum |a||b| through the same op
  for (const Tensor& t : wide) {
    Tensor a = t.clone();
    for (int64_t i = 0; i < a.numel(); ++i) a.data<double>()[i] = std::fabs(a.data<double>()[i]);
    magnitude.push_back(a);
  }
  const std::vector<Tensor> want = run_node(n, wide), bound = run_node(n, magnitude), got16 = run_node(n, low);
  ASSERT_EQ(got16.size(), want.size());
  for (size_t o = 0; o < want.size(); ++o) {
    ASSERT_EQ(got16[o].dtype(), DType::BFloat16) << n.op_type << " output " << o;
    const Tensor got = cast(got16[o], DType::Float64);
    ASSERT_EQ(got.shape(), want[o].shape());
    int64_t bad = 0;
    for (int64_t i = 0; i < want[o].numel(); ++i) {
      const double w = want[o].data<double>()[i], g = got.data<double>()[i];
      bad += std::fabs(g - w) > std::ldexp(std::fabs(w), -8) + std::ldexp(bound[o].data<double>()[i], -14);
    }
    EXPECT_EQ(bad, 0) << n.op_type << " output " << o << ": " << bad << " of " << want[o].numel()
                      << " elements off by more than a bfloat16 rounding";
  }
}

TEST(LowPrecisionKernels, NativeBfloat16ProductsAreWithinOneRoundingOfExact) {
  if (!bf16_native()) GTEST_SKIP() << "this CPU computes bfloat16 products in float32: " << bf16_compute_path();
  EXPECT_NE(std::string(bf16_compute_path()).find("native"), std::string::npos);
  // Shapes large enough for oneDNN's blocked (AMX / AVX512-BF16) kernels, odd inner sizes included.
  expect_native_close(node_of("MatMul", {"a", "b"}), {random_tensor({2, 70, 257}, 1), random_tensor({257, 96}, 2)});
  expect_native_close(node_of("MatMul", {"a", "b"}), {random_tensor({3, 1, 33, 64}, 3), random_tensor({4, 64, 17}, 4)});
  Node gemm = node_of("Gemm", {"a", "b", "c"});
  gemm.attrs["transB"] = Attribute::of_int(1);
  gemm.attrs["alpha"] = Attribute::of_float(0.5f);
  expect_native_close(gemm, {random_tensor({128, 200}, 5), random_tensor({64, 200}, 6), random_tensor({64}, 7)});
  for (int ta : {0, 1})
    for (int tb : {0, 1}) {
      Node fused = node_of("FusedMatMul", {"a", "b"}, kKilnDomain);
      fused.attrs["transA"] = Attribute::of_int(ta);
      fused.attrs["transB"] = Attribute::of_int(tb);
      expect_native_close(fused, {random_tensor(ta ? Shape{2, 96, 80} : Shape{2, 80, 96}, 8),
                                  random_tensor(tb ? Shape{48, 96} : Shape{96, 48}, 9)});
    }
}

// Convolutions on oneDNN's bfloat16 kernels: forward with bias, and the three gradients (k up to
// 16 x 9 = 144 terms for the forward and dX, 2 x 10 x 10 = 200 for dW and dB).
TEST(LowPrecisionKernels, NativeBfloat16ConvolutionsAreWithinOneRoundingOfExact) {
  if (!bf16_native()) GTEST_SKIP() << "this CPU computes bfloat16 products in float32: " << bf16_compute_path();
  Node conv = node_of("Conv", {"x", "w", "b"});
  conv.attrs["pads"] = Attribute::of_ints({1, 1, 1, 1});
  expect_native_close(conv,
                      {random_tensor({2, 16, 10, 10}, 11), random_tensor({32, 16, 3, 3}, 12), random_tensor({32}, 13)});
  Node strided = node_of("Conv", {"x", "w"});
  strided.attrs["strides"] = Attribute::of_ints({2, 2});
  expect_native_close(strided, {random_tensor({2, 3, 11, 11}, 14), random_tensor({8, 3, 5, 5}, 15)});
  Node grad = node_of("ConvGrad", {"dy", "x", "w"}, kKilnDomain);
  grad.outputs = {"dx", "dw", "db"};
  grad.attrs["pads"] = Attribute::of_ints({1, 1, 1, 1});
  expect_native_close(grad, {random_tensor({2, 32, 10, 10}, 16), random_tensor({2, 16, 10, 10}, 17),
                             random_tensor({32, 16, 3, 3}, 18)});
}

TEST(LowPrecisionKernels, KilnBf16ModeIsCheckedAndEmulateAlwaysWorks) {
  {
    const Bf16Mode bad("fast");
    test::expect_error<InvalidArgument>([] { bf16_native(); }, "KILN_BF16='fast': expected auto, native or emulate");
  }
  const bool native = bf16_native();
  const Bf16Mode forced("native");
  if (native) EXPECT_TRUE(bf16_native());
  else test::expect_error<Unsupported>([] { bf16_native(); }, "no bfloat16 instructions");
}

}  // namespace
}  // namespace kiln

// bfloat16 kernels over float32 ones (kernels/cpu/bf16_via_float.h): MatMul, Gemm, Conv and
// FusedMatMul on bfloat16 operands give exactly the float32 kernel's result on the same values,
// rounded once to bfloat16 (both accumulate in float32 in the same order).
#include <gtest/gtest.h>

#include <cstring>

#include "kiln/kernel.h"
#include "training/training_test_util.h"

namespace kiln {
namespace {

using kiln::testing::random_tensor;

Tensor to_bf16(const Tensor& f) {
  Tensor b = Tensor::empty(DType::BFloat16, f.shape());
  for (int64_t i = 0; i < f.numel(); ++i) b.data<BFloat16>()[i] = float_to_bfloat16(f.data<float>()[i]);
  return b;
}
Tensor to_f32(const Tensor& b) {
  Tensor f = Tensor::empty(DType::Float32, b.shape());
  for (int64_t i = 0; i < b.numel(); ++i) f.data<float>()[i] = bfloat16_to_float(b.data<BFloat16>()[i]);
  return f;
}

Node node_of(const std::string& op, std::vector<std::string> inputs, const std::string& domain = "") {
  Node n;
  n.op_type = op;
  n.domain = domain;
  n.name = op;
  n.inputs = std::move(inputs);
  n.outputs = {"y"};
  return n;
}

// The bfloat16 kernel gives the float32 kernel's result on the same (bfloat16) values, rounded to
// bfloat16: exactly, as both accumulate in float32 in the same order.
void expect_float32_on_rounded(const Node& n, const std::vector<Tensor>& f32_inputs) {
  std::vector<Tensor> low, rounded;
  for (const Tensor& t : f32_inputs) {
    low.push_back(to_bf16(t));
    rounded.push_back(to_f32(low.back()));
  }
  const Tensor want = to_bf16(run_node(n, rounded).at(0));
  const Tensor got = run_node(n, low).at(0);
  ASSERT_EQ(got.dtype(), DType::BFloat16);
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0) << n.op_type;
}

TEST(Bf16Kernels, ProductsComputeInFloat32OnBfloat16Values) {
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

}  // namespace
}  // namespace kiln

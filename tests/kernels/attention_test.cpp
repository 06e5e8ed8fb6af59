// ai.kiln.Attention and ai.kiln.AttentionGrad (attention_fused.cpp, attention_grad.cpp) refuse what
// they cannot compute with errors naming the operands: shapes that do not chain, batch dims that
// do not broadcast, a mask or bias larger than the scores, wrong dtypes, a bad probabilities mode,
// a dY or kept P of the wrong shape. Their values are checked in tests/ir/attention_fusion_test.cpp
// and tests/autodiff/attention_rules_test.cpp.
#include <gtest/gtest.h>

#include "kernels/kernel_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::expect_error;
using test_util::make_node;

Node attention(size_t inputs, std::map<std::string, Attribute> attrs = {}, size_t outputs = 1) {
  Node n = make_node("Attention", inputs, std::move(attrs), outputs);
  n.domain = kKilnDomain;
  return n;
}

Tensor f32(const Shape& s) { return Tensor::zeros(DType::Float32, s); }

TEST(AttentionKernel, ShapesThatDoNotChainAreErrorsNamingTheOperands) {
  expect_error<ShapeError>(
      [] {
        run_node(attention(3), {f32({2, 5, 4}), f32({2, 3, 6}), f32({2, 6, 2})});
      },
      {"Attention", "do not agree", "Q[2, 5, 4] Kt[2, 3, 6] V[2, 6, 2]"});
  expect_error<ShapeError>(
      [] {
        run_node(attention(3), {f32({2, 5, 4}), f32({2, 4, 6}), f32({2, 7, 2})});
      },
      "do not agree");
  expect_error<ShapeError>(
      [] {
        run_node(attention(3), {f32({2, 5, 4}), f32({3, 4, 6}), f32({2, 6, 2})});
      },
      {"the batch dims do not broadcast", "Kt[3, 4, 6]"});
  expect_error<ShapeError>([] { run_node(attention(3), {f32({4}), f32({4, 6}), f32({6, 2})}); }, "rank >= 2");
  const Tensor wide_mask = Tensor::zeros(DType::Bool, {5, 7});
  expect_error<ShapeError>(
      [&] {
        run_node(attention(4), {f32({2, 5, 4}), f32({2, 4, 6}), f32({2, 6, 2}), wide_mask});
      },
      {"must broadcast to the scores [.., 5, 6]", "mask[5, 7]"});
}

TEST(AttentionKernel, WrongDtypesAndABadModeAreErrors) {
  const Tensor q = f32({2, 5, 4}), kt = f32({2, 4, 6}), v = f32({2, 6, 2});
  expect_error<Unsupported>(
      [&] {
        run_node(attention(3), {Tensor::zeros(DType::Int64, {2, 5, 4}), kt, v});
      },
      {"Attention", "has no kernel for opset 17 and dtype int64"});
  expect_error<TypeError>(
      [&] {
        run_node(attention(3), {q, Tensor::zeros(DType::Float64, {2, 4, 6}), v});
      },
      "Kt and V must have Q's dtype float, got double[2, 4, 6]");
  expect_error<TypeError>([&] { run_node(attention(4), {q, kt, v, f32({5, 6})}); }, "the mask must be bool");
  Node biased = attention(5);
  biased.inputs[3] = "";
  expect_error<TypeError>(
      [&] {
        run_node(biased, {q, kt, v, Tensor(), Tensor::zeros(DType::Float64, {5, 6})});
      },
      "the bias must have Q's dtype");
  expect_error<InvalidModel>(
      [&] {
        run_node(attention(3, {{"probabilities", Attribute::of_string("never")}}, 2), {q, kt, v});
      },
      "attribute probabilities must be \"auto\", \"keep\" or \"recompute\", got \"never\"");
}

TEST(AttentionKernel, TheGradientChecksDYAndTheKeptProbabilities) {
  Node grad = make_node("AttentionGrad", 4, {}, 3);
  grad.domain = kKilnDomain;
  const Tensor q = f32({2, 5, 4}), kt = f32({2, 4, 6}), v = f32({2, 6, 2});
  expect_error<ShapeError>(
      [&] {
        run_node(grad, {f32({2, 5, 3}), q, kt, v});
      },
      "dY must be float[2, 5, 2] (the forward's output), got float[2, 5, 3]");
  expect_error<TypeError>(
      [&] {
        run_node(grad, {f32({2, 5, 2}), Tensor::zeros(DType::Int64, {2, 5, 4}), kt, v});
      },
      "AttentionGrad: Q must be float32 or float64, got int64[2, 5, 4]");
  Node kept = make_node("AttentionGrad", 7, {}, 3);
  kept.domain = kKilnDomain;
  kept.inputs[4] = kept.inputs[5] = "";
  expect_error<ShapeError>(
      [&] {
        run_node(kept, {f32({2, 5, 2}), q, kt, v, Tensor(), Tensor(), f32({2, 5, 5})});
      },
      "P must be empty or float[2, 5, 6] (the forward's probabilities), got float[2, 5, 5]");
}

}  // namespace
}  // namespace kiln

// Dropout: inference is the identity with an all-true mask (so is ratio 0 in training mode);
// training mode draws seeded masks (kiln/random.h) and scales the kept elements.
#include <gtest/gtest.h>

#include "kiln/kernel.h"
#include "kiln/random.h"

namespace kiln {
namespace {

Node dropout(size_t inputs, size_t outputs, std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.name = "drop";
  n.op_type = "Dropout";
  for (size_t i = 0; i < inputs; ++i) n.inputs.push_back("x" + std::to_string(i));
  for (size_t i = 0; i < outputs; ++i) n.outputs.push_back("y" + std::to_string(i));
  n.attrs = std::move(attrs);
  return n;
}

const Tensor kX = Tensor::from_vector<float>({2, 3}, {1, -2, 3, 0, 5.5f, -6});

void expect_identity_and_mask(const std::vector<Tensor>& out) {
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(out[0].shape(), kX.shape());
  for (int64_t i = 0; i < kX.numel(); ++i) EXPECT_EQ(out[0].data<float>()[i], kX.data<float>()[i]);
  ASSERT_EQ(out[1].dtype(), DType::Bool);
  ASSERT_EQ(out[1].shape(), kX.shape());
  for (int64_t i = 0; i < kX.numel(); ++i) EXPECT_TRUE(out[1].data<bool>()[i]);
}

TEST(Dropout, InferenceIsIdentityWithAnAllTrueMask) {
  expect_identity_and_mask(run_node(dropout(1, 2), {kX}, 13));
  expect_identity_and_mask(run_node(dropout(3, 2), {kX, Tensor::scalar<float>(0.7f), Tensor::scalar<bool>(false)}, 13));
  expect_identity_and_mask(run_node(dropout(1, 2, {{"ratio", Attribute::of_float(0.2f)}}), {kX}, 11));
  // Ratio 0 in training mode keeps everything: the identity, by the spec.
  expect_identity_and_mask(run_node(dropout(3, 2), {kX, Tensor::scalar<float>(0.f), Tensor::scalar<bool>(true)}, 13));
  const auto one = run_node(dropout(1, 1), {kX}, 13);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].data<float>()[4], 5.5f);
}

TEST(Dropout, BadRatiosAreRefused) {
  EXPECT_THROW(run_node(dropout(2, 1), {kX, Tensor::scalar<float>(1.f)}, 13), InvalidModel);  // ratio in [0, 1)
  EXPECT_THROW(run_node(dropout(1, 1, {{"ratio", Attribute::of_float(1.5f)}}), {kX}, 10), InvalidModel);
  EXPECT_THROW(run_node(dropout(3, 1), {kX, Tensor::scalar<float>(-0.1f), Tensor::scalar<bool>(true)}, 13),
               InvalidModel);
}

Tensor ramp(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = 1.0 + double(i % 7);
  return Tensor::from_vector<double>({n}, v);
}

// Runs a training-mode Dropout once (a fresh kernel, seeded when created) and returns (y, mask).
std::vector<Tensor> train_once(double ratio, const Tensor& x, std::map<std::string, Attribute> attrs = {}) {
  return run_node(dropout(3, 2, std::move(attrs)), {x, Tensor::scalar<double>(ratio), Tensor::scalar<bool>(true)}, 13);
}

TEST(Dropout, TrainingScalesKeptElementsAndZeroesTheOthers) {
  const Tensor x = ramp(4000);
  const double ratio = 0.3;
  const auto out = train_once(ratio, x);
  int64_t kept = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool k = out[1].data<bool>()[i];
    kept += k;
    // Exact: y = x * (1 / (1 - ratio)) in double, or 0.
    EXPECT_EQ(out[0].data<double>()[i], k ? x.data<double>()[i] * (1.0 / (1.0 - ratio)) : 0.0) << i;
  }
  // Keep fraction: 1 - ratio within 4 standard deviations (sd = sqrt(0.21 / 4000) = 0.0072).
  EXPECT_NEAR(double(kept) / double(x.numel()), 1.0 - ratio, 0.03);
}

TEST(Dropout, SameSeedSameMaskDifferentSeedDifferentMask) {
  const Tensor x = ramp(256);
  auto mask_of = [](const std::vector<Tensor>& out) {
    std::vector<bool> m;
    for (int64_t i = 0; i < out[1].numel(); ++i) m.push_back(out[1].data<bool>()[i]);
    return m;
  };
  set_random_seed(7);
  const auto a = mask_of(train_once(0.5, x));
  const auto b = mask_of(train_once(0.5, x));
  EXPECT_EQ(a, b);  // the same global seed and node name: the same stream
  set_random_seed(8);
  EXPECT_NE(mask_of(train_once(0.5, x)), a);
  // The seed attribute overrides the global seed.
  const auto s1 = mask_of(train_once(0.5, x, {{"seed", Attribute::of_int(3)}}));
  set_random_seed(9);
  EXPECT_EQ(mask_of(train_once(0.5, x, {{"seed", Attribute::of_int(3)}})), s1);
  EXPECT_NE(mask_of(train_once(0.5, x, {{"seed", Attribute::of_int(4)}})), s1);
  set_random_seed(0);
}

// A run's mask depends on the run index alone: runs 0, 1 differ, and run 0 again replays run 0's
// mask (what an exactly resumed training run needs).
TEST(Dropout, EachRunIndexDrawsItsOwnMaskAndReplaysIt) {
  Node n = dropout(3, 2);
  auto kernel = KernelRegistry::global().resolve("", "Dropout", 13, DType::Float64).create(n);
  const Tensor x = ramp(128);
  const Tensor ratio = Tensor::scalar<double>(0.5), train = Tensor::scalar<bool>(true);
  std::vector<std::vector<bool>> masks;
  for (uint64_t run : {0, 1, 0}) {
    Tensor y = Tensor::empty(DType::Float64, x.shape()), m = Tensor::empty(DType::Bool, x.shape());
    ComputeContext ctx{n, {&x, &ratio, &train}, {&y, &m}, run};
    kernel->compute(ctx);
    masks.emplace_back(m.data<bool>(), m.data<bool>() + m.numel());
  }
  EXPECT_NE(masks[0], masks[1]);
  EXPECT_EQ(masks[0], masks[2]);
  EXPECT_FALSE(kernel->foldable());
}

TEST(Dropout, TrainingNeedsAFloatInput) {
  EXPECT_THROW(
      run_node(dropout(3, 1),
               {Tensor::from_vector<int64_t>({2}, {1, 2}), Tensor::scalar<float>(0.5f), Tensor::scalar<bool>(true)},
               13),
      TypeError);
}

}  // namespace
}  // namespace kiln

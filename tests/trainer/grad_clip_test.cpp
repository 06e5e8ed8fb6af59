// clip_grad_norm against hand-computed norms and a long-double reference (1e-12 relative for the
// norm: both sum in at least double, in different orders); torch's treatment of inf/NaN norms.
// tests/python/test_lr_schedulers.py compares with torch.nn.utils.clip_grad_norm_ itself.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "kiln/lr_schedulers.h"
#include "test_util.h"

namespace kiln::trainer {
namespace {

using kiln::test::expect_error;

TEST(GradClip, HandComputedNormAndScale) {
  // ||(3, 4)|| = 5 (float), ||(12)|| = 12 (double): total sqrt(25 + 144) = 13.
  Tensor a = Tensor::from_vector<float>({2}, {3.f, 4.f});
  Tensor b = Tensor::from_vector<double>({1, 1}, {12.0});
  EXPECT_EQ(clip_grad_norm({&a, &b}, 6.5), 13.0);
  const double coef = 6.5 / (13.0 + 1e-6);
  EXPECT_EQ(a.data<float>()[0], 3.f * static_cast<float>(coef));
  EXPECT_EQ(a.data<float>()[1], 4.f * static_cast<float>(coef));
  EXPECT_EQ(b.data<double>()[0], 12.0 * coef);
  // Now the norm is ~6.5 and max_norm 10: returned, nothing changes.
  const float a0 = a.data<float>()[0];
  const double b0 = b.data<double>()[0];
  EXPECT_NEAR(clip_grad_norm({&a, &b}, 10.0), 6.5, 1e-5);
  EXPECT_EQ(a.data<float>()[0], a0);
  EXPECT_EQ(b.data<double>()[0], b0);
}

TEST(GradClip, CoefficientOfOneLeavesGradientsAlone) {
  // max_norm = total + 1e-6 exactly: clip_coef = 1, not applied (bit-identical values).
  Tensor a = Tensor::from_vector<double>({2}, {0.1, 0.7});
  const double total = clip_grad_norm({&a}, 1e9);
  EXPECT_DOUBLE_EQ(total, std::sqrt(0.1 * 0.1 + 0.7 * 0.7));
  EXPECT_EQ(clip_grad_norm({&a}, total + 1e-6), total);
  EXPECT_EQ(a.data<double>()[0], 0.1);
  EXPECT_EQ(a.data<double>()[1], 0.7);
}

TEST(GradClip, ManyBlocksMatchALongDoubleReference) {
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> normal(0.f, 0.01f);
  std::vector<Tensor> grads;
  for (const int64_t n : {int64_t{300'001}, int64_t{17}, int64_t{1 << 15}, int64_t{70'000}}) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = normal(rng);
    grads.push_back(Tensor::from_vector<float>({n}, v));
  }
  std::vector<double> d(5000);
  for (auto& x : d) x = normal(rng);
  grads.push_back(Tensor::from_vector<double>({50, 100}, d));

  long double sq = 0;
  for (const Tensor& g : grads)
    for (int64_t i = 0; i < g.numel(); ++i) sq += static_cast<long double>(g.item_as_double(i)) * g.item_as_double(i);
  const double reference = static_cast<double>(std::sqrt(sq));
  std::vector<Tensor> before;
  for (const Tensor& g : grads) before.push_back(g.clone());

  std::vector<Tensor*> ptrs;
  for (Tensor& g : grads) ptrs.push_back(&g);
  const double total = clip_grad_norm(ptrs, 0.25);
  EXPECT_LE(std::abs(total - reference), 1e-12 * reference) << total << " vs " << reference;
  ASSERT_GT(total, 0.25);  // so it clipped

  const double coef = 0.25 / (total + 1e-6);
  for (size_t t = 0; t < grads.size(); ++t)
    for (int64_t i = 0; i < grads[t].numel(); i += 997) {
      const double expected =
          grads[t].dtype() == DType::Float32
              ? static_cast<double>(static_cast<float>(before[t].item_as_double(i)) * static_cast<float>(coef))
              : before[t].item_as_double(i) * coef;
      ASSERT_EQ(grads[t].item_as_double(i), expected) << "gradient " << t << " element " << i;
    }
  // The clipped set has norm max_norm (up to the 1e-6 and float32 rounding).
  std::vector<Tensor*> again = ptrs;
  EXPECT_NEAR(clip_grad_norm(again, 1e9), 0.25, 1e-6);
}

TEST(GradClip, HalfPrecisionGradients) {
  Tensor h = Tensor::from_vector<Half>({2}, {float_to_half(3.f), float_to_half(4.f)});
  Tensor bf = Tensor::from_vector<BFloat16>({1}, {float_to_bfloat16(12.f)});
  EXPECT_EQ(clip_grad_norm({&h, &bf}, 1.3), 13.0);
  const float coef = static_cast<float>(1.3 / (13.0 + 1e-6));
  EXPECT_EQ(half_to_float(h.data<Half>()[1]), half_to_float(float_to_half(4.f * coef)));
  EXPECT_EQ(bfloat16_to_float(bf.data<BFloat16>()[0]), bfloat16_to_float(float_to_bfloat16(12.f * coef)));
}

TEST(GradClip, NonFiniteNormsAsTorch) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  // An infinite norm: clip_coef = 0, so finite entries become 0 and inf * 0 = NaN (torch does the same).
  Tensor a = Tensor::from_vector<float>({3}, {1.f, inf, -2.f});
  Tensor b = Tensor::from_vector<float>({1}, {5.f});
  EXPECT_EQ(clip_grad_norm({&a, &b}, 1.0), std::numeric_limits<double>::infinity());
  EXPECT_EQ(a.data<float>()[0], 0.f);
  EXPECT_TRUE(std::isnan(a.data<float>()[1]));
  EXPECT_EQ(b.data<float>()[0], 0.f);
  // A NaN norm: clamp keeps NaN, every gradient becomes NaN.
  Tensor c = Tensor::from_vector<float>({2}, {std::nanf(""), 1.f});
  Tensor d = Tensor::from_vector<double>({1}, {2.0});
  EXPECT_TRUE(std::isnan(clip_grad_norm({&c, &d}, 1.0)));
  EXPECT_TRUE(std::isnan(c.data<float>()[1]));
  EXPECT_TRUE(std::isnan(d.data<double>()[0]));
}

TEST(GradClip, EmptyZeroAndErrors) {
  EXPECT_EQ(clip_grad_norm({}, 1.0), 0.0);
  Tensor z = Tensor::zeros(DType::Float32, {4});
  EXPECT_EQ(clip_grad_norm({&z}, 0.0), 0.0);  // 0 / (0 + 1e-6) = 0 < 1: zeros stay zeros
  EXPECT_EQ(z.data<float>()[0], 0.f);

  Tensor i = Tensor::from_vector<int64_t>({2}, {1, 2});
  expect_error<TypeError>([&] { clip_grad_norm({&z, &i}, 1.0); }, "gradient 1 is int64[2]");
  EXPECT_THROW(clip_grad_norm({&z, nullptr}, 1.0), InvalidArgument);
  Tensor undefined;
  EXPECT_THROW(clip_grad_norm({&undefined}, 1.0), InvalidArgument);
  EXPECT_THROW(clip_grad_norm({&z}, -1.0), InvalidArgument);
  EXPECT_THROW(clip_grad_norm({&z}, std::nan("")), InvalidArgument);
  Tensor m = Tensor::zeros(DType::Float32, {2, 3}).permute({1, 0});
  EXPECT_THROW(clip_grad_norm({&m}, 1.0), InvalidArgument);
}

// ZeRO: gradients split between ranks clip by the norm of all of them, when each rank's sum of
// squares is summed over the ranks (here two "ranks" in one process, their sums exchanged).
TEST(GradClip, SplitBetweenRanksClipsByTheGlobalNorm) {
  Tensor a = Tensor::from_vector<float>({2}, {3.f, 4.f}), b = Tensor::from_vector<float>({1}, {12.f});
  Tensor a2 = a.clone();
  const double whole = clip_grad_norm({&a, &b}, 6.5);
  const double other_rank = 144.0;  // b's sum of squares, held by the other rank
  EXPECT_EQ(clip_grad_norm({&a2}, 6.5, [&](double mine) { return mine + other_rank; }), whole);
  EXPECT_EQ(a2.data<float>()[0], a.data<float>()[0]);
  EXPECT_EQ(a2.data<float>()[1], a.data<float>()[1]);
  // A rank with no gradients still takes part in the sum.
  bool asked = false;
  EXPECT_EQ(clip_grad_norm({}, 6.5,
                           [&](double mine) {
                             asked = true;
                             return mine + 169.0;
                           }),
            13.0);
  EXPECT_TRUE(asked);
}

}  // namespace
}  // namespace kiln::trainer

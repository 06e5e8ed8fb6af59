// vmath::erf (the float32 Erf kernel) against erf in double rounded once to float, element by
// element and bit for bit: every vector copy, the padded tail, threads, and special values; the
// softmax row helpers (sum_exp, scaled_exp) against std::exp in double.
#include "kernels/cpu/vector_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kiln/kernel.h"

namespace kiln {
namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

std::vector<float> test_values() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.f,   -0.f, 1e-45f, -1e-45f, 1e-38f, 1e-10f, 0.5f,
                          -0.5f, 1.f,  -1.f,   3.65f,   -3.65f, 3.9f,   4.f,
                          6.f,   10.f, -10.f,  1e10f,   inf,    -inf,   std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 gen(5);
  std::normal_distribution<float> d(0.f, 2.f);
  while (v.size() < 100003) v.push_back(d(gen));  // past the threads' grain, odd length
  return v;
}

TEST(VectorMath, ErfIsErfInDoubleRoundedToFloat) {
  const std::vector<float> x = test_values();
  for (const int64_t n :
       {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{17}, static_cast<int64_t>(x.size())}) {
    std::vector<float> y(static_cast<size_t>(n));
    vmath::erf(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float want = static_cast<float>(std::erf(static_cast<double>(x[i])));
      ASSERT_TRUE(same_bits(y[i], want) || (std::isnan(y[i]) && std::isnan(want)))
          << "erf(" << x[i] << ") = " << y[i] << ", want " << want << " (n = " << n << ")";
      ASSERT_TRUE(same_bits(vmath::erf_one(x[i]), want) || std::isnan(want));
    }
  }
}

TEST(VectorMath, ErfKernelRunsInPlace) {
  std::vector<float> x = test_values();
  const std::vector<float> copy = x;
  vmath::erf(x.data(), x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_TRUE(same_bits(x[i], vmath::erf_one(copy[i])) || std::isnan(copy[i])) << copy[i];
}

TEST(VectorMath, ErfNodeTakesTheVectorPath) {
  Node n;
  n.name = "erf";
  n.op_type = "Erf";
  n.inputs = {"x"};
  n.outputs = {"y"};
  const std::vector<float> values = test_values();
  const Tensor x = Tensor::from_vector<float>({static_cast<int64_t>(values.size())}, values);
  const Tensor y = run_node(n, {x}, 17).at(0);
  for (int64_t i = 0; i < y.numel(); ++i)
    ASSERT_TRUE(same_bits(y.data<float>()[i], vmath::erf_one(values[static_cast<size_t>(i)])) ||
                std::isnan(values[static_cast<size_t>(i)]));
}

// The softmax row helpers against std::exp in double: the sum within 1e-13 relative, each scaled
// exponential within one float rounding of the double value (libmvec's exp is within 4 ulp of
// double), on the copy this CPU selects, for lengths around the vector widths (the -inf-padded
// tail) and rows with -inf scores.
TEST(VectorMath, SoftmaxRowExponentialsMatchDoubleExp) {
  std::mt19937 gen(11);
  std::normal_distribution<float> d(0.f, 3.f);
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{8}, int64_t{9},
                          int64_t{15}, int64_t{16}, int64_t{17}, int64_t{8193}}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = d(gen);
    if (n > 2) x[1] = -std::numeric_limits<float>::infinity();
    float m = -std::numeric_limits<float>::infinity();
    for (float v : x) m = std::max(m, v);
    const double shift = n ? double(m) : 0.0, scale = -0.37;
    double want = 0;
    for (float v : x) want += std::exp(static_cast<double>(v) - shift);
    const double got = vmath::sum_exp(x.data(), n, shift);
    EXPECT_LE(std::abs(got - want), 1e-13 * std::max(1.0, want)) << "n = " << n;
    std::vector<float> y(static_cast<size_t>(n), 99.f);
    vmath::scaled_exp(x.data(), y.data(), n, shift, scale);
    for (int64_t i = 0; i < n; ++i) {
      const double exact = scale * std::exp(static_cast<double>(x[i]) - shift);
      EXPECT_LE(std::abs(double(y[i]) - exact), std::abs(exact) * 6e-8 + 1e-45) << "n = " << n << ", i = " << i;
    }
  }
}

// vmath::exp_sum (the fused attention's softmax rows) against exp in double of the same float
// argument: within 2 ulp from exp(-87) = 1.6e-38 to float's max, 0 below (and for -inf), NaN kept,
// inf above; the sum of what it wrote. Every length around the vector widths.
TEST(VectorMath, ExpSumIsExpWithinTwoUlp) {
  std::mt19937 gen(12);
  std::uniform_real_distribution<float> d(-100.f, 90.f);
  const float inf = std::numeric_limits<float>::infinity();
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{4099}}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = d(gen);
    if (n > 3) x[1] = -inf, x[2] = std::nanf(""), x[3] = 88.f;
    const float shift = 1.5f;
    std::vector<float> y = x;
    const double sum = vmath::exp_sum(y.data(), n, shift);
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float arg = x[size_t(i)] - shift;
      const double exact = std::exp(static_cast<double>(arg));
      const float got = y[size_t(i)];
      want_sum += static_cast<double>(got);
      if (std::isnan(arg)) EXPECT_TRUE(std::isnan(got)) << i;
      else if (arg < -87.f) EXPECT_EQ(got, 0.f) << arg;
      else if (exact > std::numeric_limits<float>::max()) EXPECT_EQ(got, inf) << arg;
      else EXPECT_LE(std::abs(double(got) - exact), 2.4e-7 * exact) << "exp(" << arg << ")";
    }
    if (n <= 3) EXPECT_EQ(sum, want_sum);
    else EXPECT_TRUE(std::isnan(sum));
  }
  std::vector<float> row{0.f, -1.f, -inf, -3.f};
  const double s = vmath::exp_sum(row.data(), 4, 0.f);
  EXPECT_NEAR(s, 1 + std::exp(-1.0) + std::exp(-3.0), 1e-6);
  EXPECT_EQ(row[2], 0.f);
}

// vmath::max against std::max from -inf over every length around the vector widths, with the
// largest element at each position of the tail and NaNs (skipped) at the front and back.
TEST(VectorMath, MaxSkipsNaNsLikeTheScalarLoop) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::mt19937 gen(3);
  std::normal_distribution<float> d(0.f, 3.f);
  for (int64_t n = 0; n <= 40; ++n) {
    for (int64_t at = 0; at < std::max<int64_t>(n, 1); ++at) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = d(gen);
      if (n > 0) x[static_cast<size_t>(at)] = 50.f + static_cast<float>(at);
      if (n > 2) x.front() = nan;
      if (n > 3) x.back() = nan;
      float want = -inf;
      for (float v : x) want = std::max(want, v);
      ASSERT_TRUE(same_bits(vmath::max(x.data(), n), want)) << "n = " << n << ", at = " << at;
    }
  }
  const std::vector<float> nans(20, nan);
  EXPECT_EQ(vmath::max(nans.data(), 20), -inf);
}

// gelu against gelu_one: the tanh form (double inside, rounded once) within one float rounding
// (libmvec's exp is within 4 ulp of double), the erf form (float erfc with its argument's rounding
// corrected) within 4 ulp (2.4e-7 relative; measured 3.3 ulp at worst), and gelu_grad (float inside) against gelu_slope
// within 1e-5 relative (2e-7 of dY absolute): both forms, every length around the blocks and vector widths, in place.
TEST(VectorMath, GeluAndItsGradientMatchDouble) {
  const std::vector<float> all = test_values();
  for (const bool tanh : {false, true}) {
    for (const int64_t n : {int64_t{1}, int64_t{15}, int64_t{63}, int64_t{65}, int64_t{129}, int64_t{100003}}) {
      std::vector<float> x(all.begin(), all.begin() + n), y(static_cast<size_t>(n)), dy(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) dy[static_cast<size_t>(i)] = 0.5f + static_cast<float>(i % 5);
      vmath::gelu(x.data(), y.data(), n, tanh);
      std::vector<float> dx = dy;
      vmath::gelu_grad(dx.data(), x.data(), dx.data(), n, tanh);  // dX written over dY
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = static_cast<size_t>(i);
        if (std::isnan(x[k]) || std::isinf(x[k])) continue;
        const double want = vmath::gelu_one(x[k], tanh);
        ASSERT_LE(std::abs(y[k] - want), (tanh ? 1.2e-7 : 2.4e-7) * std::abs(want) + 1e-44)
            << "gelu(" << x[k] << "), tanh " << tanh;
        const double slope = double(dy[k]) * vmath::gelu_slope(x[k], tanh);
        // Near Gelu's minimum (x = -0.75) the two terms of the slope cancel: an absolute floor.
        ASSERT_LE(std::abs(dx[k] - slope), 1e-5 * std::abs(slope) + 2e-7 * std::abs(dy[k]))
            << "gelu'(" << x[k] << "), tanh " << tanh << ", n " << n;
      }
    }
  }
  // NaN stays NaN; +-inf give Gelu's limits.
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x{std::numeric_limits<float>::quiet_NaN(), inf, -inf}, y(3);
  vmath::gelu(x.data(), y.data(), 3, false);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], inf);
}

}  // namespace
}  // namespace kiln

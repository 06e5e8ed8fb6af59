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

}  // namespace
}  // namespace kiln

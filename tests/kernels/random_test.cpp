// RandomUniform, RandomNormal, their *Like forms and Bernoulli: the draws' statistics over 200,000
// values (mean and variance within 5 standard errors), shapes and dtypes, exact Bernoulli at p = 0
// and 1, and seeding: one seed gives one sequence of runs (two Sessions agree run for run),
// successive runs differ, a different seed differs. The ONNX node cases for Bernoulli expect
// numpy's generator's values, which Kiln does not reproduce (tools/conformance/known_bad.txt).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "kiln/session.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

std::pair<double, double> mean_var(const Tensor& t) {
  const std::vector<double> v = as_doubles(t);
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= double(v.size());
  for (double x : v) s += (x - m) * (x - m);
  return {m, s / double(v.size() - 1)};
}

TEST(Random, UniformAndNormalStatistics) {
  const int64_t n = 200000;
  const Tensor u = run1(make_node("RandomUniform", 0,
                                  {{"shape", Attribute::of_ints({400, 500})},
                                   {"low", Attribute::of_float(-2.0f)},
                                   {"high", Attribute::of_float(4.0f)},
                                   {"seed", Attribute::of_float(3.0f)}}),
                        {});
  EXPECT_EQ(u.dtype(), DType::Float32);
  EXPECT_EQ(u.shape(), (Shape{400, 500}));
  auto [um, uv] = mean_var(u);
  EXPECT_NEAR(um, 1.0, 5 * std::sqrt(3.0 / double(n)));  // variance of U(-2, 4) is 3
  EXPECT_NEAR(uv, 3.0, 0.05);
  const std::vector<double> vals = as_doubles(u);
  EXPECT_GE(*std::min_element(vals.begin(), vals.end()), -2.0);
  EXPECT_LT(*std::max_element(vals.begin(), vals.end()), 4.0);

  const Tensor like = Tensor::zeros(DType::Float64, {n});
  const Tensor z = run1(
      make_node("RandomNormalLike", 1, {{"mean", Attribute::of_float(0.5f)}, {"scale", Attribute::of_float(2.0f)}}),
      {like});
  EXPECT_EQ(z.dtype(), DType::Float64);
  auto [zm, zv] = mean_var(z);
  EXPECT_NEAR(zm, 0.5, 5 * 2.0 / std::sqrt(double(n)));
  EXPECT_NEAR(zv, 4.0, 0.1);
  const Tensor h = run1(make_node("RandomUniformLike", 1, {{"dtype", Attribute::of_int(10)}}), {like});  // float16
  EXPECT_EQ(h.dtype(), DType::Float16);
}

TEST(Random, BernoulliIsExactAtTheEndsAndFrequentInBetween) {
  std::vector<float> p(100000, 0.3f);
  p[0] = 0.0f;
  p[1] = 1.0f;
  const Tensor y = run1(make_node("Bernoulli", 1), {Tensor::from_vector<float>({100000}, p)});
  const std::vector<double> v = as_doubles(y);
  EXPECT_EQ(v[0], 0.0);
  EXPECT_EQ(v[1], 1.0);
  double ones = 0;
  for (double x : v) ones += x;
  EXPECT_NEAR(ones / 100000.0, 0.3, 5 * std::sqrt(0.21 / 100000.0));
  const Tensor b =
      run1(make_node("Bernoulli", 1, {{"dtype", Attribute::of_int(9)}}), {Tensor::from_vector<float>({2}, {0, 1})});
  EXPECT_EQ(b.dtype(), DType::Bool);
  expect_error<InvalidModel>([&] { run_node(make_node("Bernoulli", 1), {Tensor::from_vector<float>({1}, {1.5f})}); },
                             "probability input[0] = 1.5 is outside [0, 1]");
}

Model model(float seed) {
  Model m;
  m.opsets = {{"", 17}};
  ValueInfo out;
  out.name = "y";
  out.dtype = DType::Float32;
  out.has_type = out.has_shape = true;
  out.dims = {Dim{8, ""}};
  m.graph.outputs = {out};
  Node n = make_node("RandomUniform", 0, {{"shape", Attribute::of_ints({8})}, {"seed", Attribute::of_float(seed)}});
  n.name = "draw";
  m.graph.nodes = {n};
  return m;
}

TEST(Random, OneSeedOneSequence) {
  Session a(model(7.0f)), b(model(7.0f)), c(model(8.0f));
  const std::vector<double> a0 = as_doubles(a.run({})["y"]), a1 = as_doubles(a.run({})["y"]);
  EXPECT_NE(a0, a1);  // successive runs draw anew
  EXPECT_EQ(as_doubles(b.run({})["y"]), a0);
  EXPECT_EQ(as_doubles(b.run({})["y"]), a1);
  EXPECT_NE(as_doubles(c.run({})["y"]), a0);
}

TEST(Random, BadAttributesAreNamed) {
  expect_error<InvalidModel>([&] { run_node(make_node("RandomUniform", 0), {}); }, "attribute 'shape' is required");
  expect_error<InvalidModel>(
      [&] {
        run_node(make_node("RandomUniform", 0,
                           {{"shape", Attribute::of_ints({2})},
                            {"low", Attribute::of_float(2.0f)},
                            {"high", Attribute::of_float(1.0f)}}),
                 {});
      },
      "low 2 must not exceed high 1");
  expect_error<TypeError>(
      [&] {
        run_node(make_node("RandomNormalLike", 1, {{"dtype", Attribute::of_int(7)}}),
                 {Tensor::zeros(DType::Float32, {2})});
      },
      "dtype int64 must be a float type");
}

}  // namespace
}  // namespace kiln

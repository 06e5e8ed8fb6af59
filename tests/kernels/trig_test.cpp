// Trigonometric and hyperbolic ops through run_node against double libm, over each op's domain and
// beyond it (NaN, ±inf), in float32, float64 and float16.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;

struct TrigCase {
  std::string op;
  double (*ref)(double);
  double lo, hi;  // the sweep
};

const std::vector<TrigCase> kCases = {
    {"Sin", [](double x) { return std::sin(x); }, -10, 10},
    {"Cos", [](double x) { return std::cos(x); }, -10, 10},
    {"Tan", [](double x) { return std::tan(x); }, -1.5, 1.5},
    {"Asin", [](double x) { return std::asin(x); }, -1, 1},
    {"Acos", [](double x) { return std::acos(x); }, -1, 1},
    {"Atan", [](double x) { return std::atan(x); }, -100, 100},
    {"Sinh", [](double x) { return std::sinh(x); }, -20, 20},
    {"Cosh", [](double x) { return std::cosh(x); }, -20, 20},
    {"Asinh", [](double x) { return std::asinh(x); }, -100, 100},
    {"Acosh", [](double x) { return std::acosh(x); }, 1, 100},
    {"Atanh", [](double x) { return std::atanh(x); }, -0.999, 0.999},
};

Tensor run1(const std::string& op, const Tensor& x) {
  Node n;
  n.name = "t";
  n.op_type = op;
  n.inputs = {"X"};
  n.outputs = {"Y"};
  return run_node(n, {x}, 13).at(0);
}

TEST(Trig, Float32AndFloat64MatchLibm) {
  for (const TrigCase& c : kCases) {
    const int64_t n = 20001;
    Tensor xf = Tensor::empty(DType::Float32, {n});
    Tensor xd = Tensor::empty(DType::Float64, {n});
    for (int64_t i = 0; i < n; ++i) {
      xd.data<double>()[i] = c.lo + (c.hi - c.lo) * static_cast<double>(i) / static_cast<double>(n - 1);
      xf.data<float>()[i] = static_cast<float>(xd.data<double>()[i]);
    }
    const Tensor yf = run1(c.op, xf), yd = run1(c.op, xd);
    for (int64_t i = 0; i < n; ++i) {
      const double wf = c.ref(xf.data<float>()[i]), wd = c.ref(xd.data<double>()[i]);
      // Functions near a zero of theirs (sin(pi)) lose relative precision: a small absolute floor.
      ASSERT_NEAR(yf.data<float>()[i], wf, 2e-7 * std::fabs(wf) + 1e-7) << c.op << " x=" << xf.data<float>()[i];
      ASSERT_NEAR(yd.data<double>()[i], wd, 1e-15 * std::fabs(wd) + 1e-16) << c.op << " x=" << xd.data<double>()[i];
    }
  }
}

TEST(Trig, OutsideTheDomainAndSpecialValues) {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = Tensor::from_vector<float>({5}, {2.f, -2.f, std::nanf(""), static_cast<float>(inf), 0.5f});
  for (const std::string op : {"Asin", "Acos"}) {
    const Tensor y = run1(op, x);
    EXPECT_TRUE(std::isnan(y.data<float>()[0]) && std::isnan(y.data<float>()[1]) && std::isnan(y.data<float>()[2]))
        << op;
  }
  EXPECT_TRUE(std::isnan(run1("Acosh", Tensor::from_vector<float>({1}, {0.5f})).data<float>()[0]));
  const Tensor at = run1("Atanh", Tensor::from_vector<float>({3}, {1.f, -1.f, 2.f}));
  EXPECT_EQ(at.data<float>()[0], static_cast<float>(inf));
  EXPECT_EQ(at.data<float>()[1], -static_cast<float>(inf));
  EXPECT_TRUE(std::isnan(at.data<float>()[2]));
  EXPECT_EQ(run1("Sinh", Tensor::from_vector<float>({1}, {100.f})).data<float>()[0], static_cast<float>(inf));
  EXPECT_EQ(run1("Atan", Tensor::from_vector<double>({1}, {inf})).data<double>()[0], M_PI / 2);
  // float16 computes in float: within half's precision.
  const Tensor h = run1("Sin", Tensor::from_vector<Half>({1}, {float_to_half(1.f)}));
  EXPECT_NEAR(h.item_as_double(), std::sin(1.0), 1e-3);
  EXPECT_EQ(run1("Cos", Tensor::zeros(DType::Float32, {0, 4})).shape(), (Shape{0, 4}));
}

TEST(Trig, RejectsIntegers) {
  expect_error<Unsupported>([&] { run1("Sin", Tensor::zeros(DType::Int64, {2})); }, {"Sin", "int64"});
}

}  // namespace
}  // namespace kiln

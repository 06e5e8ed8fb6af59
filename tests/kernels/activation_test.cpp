// Activations through run_node against ONNX's formulas evaluated in double. Float32 runs on oneDNN
// for most of them; the 1e-6 relative bound is the one oneDNN must meet to be used at all.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

// Dense values over [lo, hi] plus edge cases, shuffled into a tensor large enough for several threads.
Tensor sweep(float lo, float hi, int64_t n = 40000) {
  Tensor t = Tensor::empty(DType::Float32, {n});
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(n - 1);
  const float edges[] = {0.f, -0.f, 1e-8f, -1e-8f, 1e-3f, -1e-3f, lo, hi};
  for (size_t i = 0; i < std::size(edges); ++i) p[static_cast<int64_t>(i) * 997 % n] = edges[i];
  return t;
}

struct ActCase {
  std::string op;
  std::map<std::string, Attribute> attrs;
  int64_t opset;
  std::function<double(double)> ref;
  float lo, hi;
  double atol = 0;  // for outputs that cancel to ~0 (elu/selu near 0 computed as exp(x) - 1)
};

const double kSeluAlpha = 1.67326319217681884765625, kSeluGamma = 1.05070102214813232421875;

std::vector<ActCase> cases() {
  return {
      {"Relu", {}, 14, [](double x) { return x > 0 ? x : 0; }, -10, 10},
      {"LeakyRelu", {}, 16, [](double x) { return x < 0 ? static_cast<double>(0.01f) * x : x; }, -10, 10},
      {"LeakyRelu", {{"alpha", Attribute::of_float(0.25f)}}, 6, [](double x) { return x < 0 ? 0.25 * x : x; }, -10, 10},
      {"Sigmoid", {}, 13, [](double x) { return 1 / (1 + std::exp(-x)); }, -110, 40},
      {"Tanh", {}, 13, [](double x) { return std::tanh(x); }, -20, 20},
      {"Elu", {}, 6, [](double x) { return x > 0 ? x : std::expm1(x); }, -20, 20, 1e-8},
      {"Elu",
       {{"alpha", Attribute::of_float(0.5f)}},
       6,
       [](double x) { return x > 0 ? x : 0.5 * std::expm1(x); },
       -20,
       20,
       1e-8},
      {"Selu", {}, 6, [](double x) { return kSeluGamma * (x > 0 ? x : kSeluAlpha * std::expm1(x)); }, -20, 20, 1e-8},
      {"Selu",
       {{"alpha", Attribute::of_float(2.f)}, {"gamma", Attribute::of_float(3.f)}},
       6,
       [](double x) { return 3.0 * (x > 0 ? x : 2.0 * std::expm1(x)); },
       -20,
       20,
       1e-8},
      {"Softplus",
       {},
       1,
       [](double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); },
       -110,
       110},
      {"HardSigmoid",
       {},
       6,
       [](double x) { return std::clamp(static_cast<double>(0.2f) * x + 0.5, 0.0, 1.0); },
       -5,
       5,
       1e-7},
      {"HardSigmoid",
       {{"alpha", Attribute::of_float(0.5f)}, {"beta", Attribute::of_float(0.25f)}},
       6,
       [](double x) { return std::clamp(0.5 * x + 0.25, 0.0, 1.0); },
       -5,
       5,
       1e-7},
      {"HardSwish", {}, 14, [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }, -8, 8, 1e-7},
      {"Softsign", {}, 1, [](double x) { return x / (1 + std::fabs(x)); }, -1000, 1000},
      {"ThresholdedRelu", {}, 10, [](double x) { return x > 1.0 ? x : 0.0; }, -5, 5},
      {"ThresholdedRelu",
       {{"alpha", Attribute::of_float(-0.5f)}},
       10,
       [](double x) { return x > -0.5 ? x : 0.0; },
       -5,
       5},
      {"Mish", {}, 18, [](double x) { return x * std::tanh(std::log1p(std::exp(x))); }, -80, 40},
      // 1 + erf(x/sqrt 2) as erfc(-x/sqrt 2): the same value without cancelling to 0 for x << 0.
      {"Gelu", {}, 17, [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }, -12, 12},
      {"Gelu",
       {{"approximate", Attribute::of_string("tanh")}},
       20,
       // x/2 (1 + tanh(u)) as x / (1 + e^(-2u)), equal but free of cancellation for x << 0.
       [](double x) { return x / (1 + std::exp(-2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); },
       -8,
       8},
  };
}

TEST(Activation, Float32MatchesOnnxFormulaWithin1e6Relative) {
  for (const ActCase& c : cases()) {
    const Tensor x = sweep(c.lo, c.hi);
    const Tensor y = run1(make_node(c.op, {"X"}, c.attrs), {x}, c.opset);
    ASSERT_EQ(y.shape(), x.shape());
    ASSERT_EQ(y.dtype(), DType::Float32);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double xv = x.data<float>()[i], want = c.ref(xv), got = y.data<float>()[i];
      // Results near float's subnormal range cannot carry 1e-6 relative precision: absolute there.
      // (oneDNN flushes to 0 from just above FLT_MIN: sigmoid(-87.33) = 1.18e-38 comes out 0.)
      const double tol = std::max(1e-6 * std::fabs(want) + c.atol, 2.0 * std::numeric_limits<float>::min());
      ASSERT_LE(std::fabs(got - want), tol) << c.op << " x=" << xv;
    }
  }
}

// ONNX's formulas (numpy's maximum/clip/exp) carry NaN through; so must every path.
TEST(Activation, NaNPropagates) {
  for (const ActCase& c : cases()) {
    Tensor x = sweep(-1, 1, 1000);
    x.data<float>()[500] = std::nanf("");
    const Tensor y = run1(make_node(c.op, {"X"}, c.attrs), {x}, c.opset);
    EXPECT_TRUE(std::isnan(y.data<float>()[500])) << c.op << " gives " << y.data<float>()[500];
    const Tensor yd =
        run1(make_node(c.op, {"X"}, c.attrs), {Tensor::from_vector<double>({1}, {std::nan("")})}, c.opset);
    EXPECT_TRUE(std::isnan(yd.data<double>()[0])) << c.op << " (double) gives " << yd.data<double>()[0];
  }
}

TEST(Activation, OtherFloatDtypesUseTheSameFormula) {
  for (const ActCase& c : cases()) {
    const std::vector<double> xs = {-3.5, -1.0, -0.25, 0.0, 0.5, 2.0, 7.0};
    Tensor xd = Tensor::from_vector<double>({7}, xs);
    const Tensor yd = run1(make_node(c.op, {"X"}, c.attrs), {xd}, c.opset);
    ASSERT_EQ(yd.dtype(), DType::Float64);
    for (size_t i = 0; i < xs.size(); ++i)
      ASSERT_NEAR(yd.data<double>()[i], c.ref(xs[i]), 1e-7 * std::fabs(c.ref(xs[i])) + 1e-12) << c.op << " x=" << xs[i];
    std::vector<Half> hs;
    for (double v : xs) hs.push_back(float_to_half(static_cast<float>(v)));
    const Tensor yh = run1(make_node(c.op, {"X"}, c.attrs), {Tensor::from_vector<Half>({7}, hs)}, c.opset);
    ASSERT_EQ(yh.dtype(), DType::Float16);
    for (size_t i = 0; i < xs.size(); ++i)  // float16 keeps 11 bits
      ASSERT_NEAR(yh.item_as_double(static_cast<int64_t>(i)), c.ref(xs[i]), 1e-3 * std::fabs(c.ref(xs[i])) + 1e-4)
          << c.op << " x=" << xs[i];
  }
}

// ai.kiln.Gelu with out_dtype (what fold_16_bit_casts writes for mixed precision) evaluates in
// float32 and rounds to 16 bits: against Gelu (evaluated in double) then a Cast, each element is the
// same 16-bit value or its neighbour, and few are neighbours (where the value lies within the float
// evaluation's error of halfway between two 16-bit values). Both forms, bfloat16 and float16,
// lengths around its 2048-element chunks and the threads' shares, NaN and the infinities. It
// refuses other out_dtypes and non-float32 inputs.
TEST(Activation, GeluWithOutDtypeIsGeluThenCastWithinOneUnit) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const int64_t n : {int64_t{1}, int64_t{2047}, int64_t{2048}, int64_t{2049}, int64_t{70001}}) {
    Tensor x = sweep(-12.f, 12.f, std::max<int64_t>(n, 8));
    if (n < x.numel()) x = Tensor::from_vector<float>({n}, std::vector<float>(x.data<float>(), x.data<float>() + n));
    if (n > 3) {
      x.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
      x.data<float>()[1] = inf;
      x.data<float>()[2] = -inf;
    }
    for (const char* form : {"none", "tanh"}) {
      Node gelu = make_node("Gelu", 1, {{"approximate", Attribute::of_string(form)}});
      gelu.domain = kKilnDomain;
      const Tensor full = run1(gelu, {x});
      for (const DType type : {DType::BFloat16, DType::Float16}) {
        Node rounded = gelu;
        rounded.attrs["out_dtype"] = Attribute::of_int(dtype_to_onnx(type));
        SCOPED_TRACE(std::to_string(n) + " " + form + " " + dtype_name(type));
        const Tensor got = run1(rounded, {x}), want = cast_to(full, type);
        ASSERT_EQ(got.dtype(), type);
        ASSERT_EQ(got.shape(), want.shape());
        const auto* g = static_cast<const uint16_t*>(got.raw_data());
        const auto* w = static_cast<const uint16_t*>(want.raw_data());
        const Tensor got32 = cast_to(got, DType::Float32), want32 = cast_to(want, DType::Float32);
        int64_t neighbours = 0;
        for (int64_t i = n > 3 ? 1 : 0; i < n; ++i) {  // element 0: NaN, below
          if (g[i] == w[i]) continue;
          // In the tanh form's tail (x below -9.5) float's exp(-2u) overflows where double's does
          // not: 0 against values below 1e-37.
          const float gv = got32.data<float>()[i], wv = want32.data<float>()[i];
          if (gv == 0.f && std::fabs(wv) < 1e-37f) continue;
          ASSERT_EQ(g[i] >> 15, w[i] >> 15) << "element " << i << " (x = " << x.data<float>()[i] << ") changed sign";
          ASSERT_EQ(std::abs(int(g[i]) - int(w[i])), 1)
              << "element " << i << " (x = " << x.data<float>()[i] << "): " << gv << " against " << wv;
          ++neighbours;
        }
        EXPECT_LE(neighbours, std::max<int64_t>(1, n / 1000));
        if (n > 3) {
          EXPECT_TRUE(std::isnan(cast_to(got, DType::Float32).data<float>()[0]));
        }
      }
    }
  }
  Node bad = make_node("Gelu", 1, {{"out_dtype", Attribute::of_int(1)}});
  bad.domain = kKilnDomain;
  expect_error<InvalidModel>([&] { run1(bad, {Tensor::zeros(DType::Float32, {4})}); },
                             "attribute out_dtype is 1; it must be bfloat16 (16) or float16 (10)");
  bad.attrs["out_dtype"] = Attribute::of_int(dtype_to_onnx(DType::BFloat16));
  expect_error<TypeError>([&] { run1(bad, {Tensor::zeros(DType::Float64, {4})}); },
                          "Gelu with out_dtype: X must be float32, got double[4]");
}

TEST(Activation, ReluOnIntegersAndEmptyTensors) {
  const Tensor y = run1(make_node("Relu", {"X"}), {Tensor::from_vector<int8_t>({4}, {-128, -1, 0, 127})}, 14);
  EXPECT_EQ(y.to_int64_vector(), (std::vector<int64_t>{0, 0, 0, 127}));
  const Tensor e = run1(make_node("Sigmoid", {"X"}), {Tensor::zeros(DType::Float32, {3, 0})});
  EXPECT_EQ(e.shape(), (Shape{3, 0}));
  EXPECT_THROW(run1(make_node("Tanh", {"X"}), {Tensor::zeros(DType::Int32, {2})}), Unsupported);
}

TEST(Activation, SoftplusAndSigmoidStayFiniteAtExtremes) {
  const Tensor x = Tensor::from_vector<float>({4}, {-100.f, 100.f, -1e30f, 1e30f});
  const Tensor sp = run1(make_node("Softplus", {"X"}), {x}, 1);
  EXPECT_NEAR(sp.data<float>()[0], std::exp(-100.0), std::numeric_limits<float>::min());  // subnormal
  EXPECT_EQ(sp.data<float>()[1], 100.f);
  EXPECT_EQ(sp.data<float>()[2], 0.f);
  EXPECT_EQ(sp.data<float>()[3], 1e30f);
  const Tensor sg = run1(make_node("Sigmoid", {"X"}), {x}, 13);
  EXPECT_NEAR(sg.data<float>()[0], std::exp(-100.0), std::numeric_limits<float>::min());
  EXPECT_EQ(sg.data<float>()[1], 1.f);
  EXPECT_EQ(sg.data<float>()[2], 0.f);
  EXPECT_EQ(sg.data<float>()[3], 1.f);
}

TEST(Clip, Opset6BoundsAreAttributes) {
  const Tensor x = Tensor::from_vector<float>({5}, {-3.f, -1.f, 0.f, 1.f, 3.f});
  const Node n = make_node("Clip", {"X"}, {{"min", Attribute::of_float(-1.5f)}, {"max", Attribute::of_float(2.f)}});
  EXPECT_EQ(run1(n, {x}, 6).to_int64_vector(), (std::vector<int64_t>{-1, -1, 0, 1, 2}));
  EXPECT_EQ(run1(n, {x}, 6).data<float>()[0], -1.5f);
  const Node no_bounds = make_node("Clip", {"X"});
  EXPECT_EQ(run1(no_bounds, {x}, 10).to_int64_vector(), (std::vector<int64_t>{-3, -1, 0, 1, 3}));
}

TEST(Clip, Opset11BoundsAreOptionalScalarInputs) {
  const Tensor x = sweep(-10, 10, 30000);
  const Tensor lo = Tensor::scalar<float>(-2.5f), hi = Tensor::scalar<float>(4.f);
  struct Case {
    Tensor lo, hi;
    float want_lo, want_hi;
  };
  const float inf = std::numeric_limits<float>::infinity();
  for (const Case& c : {Case{lo, hi, -2.5f, 4.f}, Case{lo, Tensor(), -2.5f, inf}, Case{Tensor(), hi, -inf, 4.f},
                        Case{Tensor(), Tensor(), -inf, inf}}) {
    const Node n = make_node("Clip", {"X", c.lo.defined() ? "lo" : "", c.hi.defined() ? "hi" : ""});
    const Tensor y = run1(n, {x, c.lo, c.hi}, 13);
    for (int64_t i = 0; i < x.numel(); ++i)
      ASSERT_EQ(y.data<float>()[i], std::min(std::max(x.data<float>()[i], c.want_lo), c.want_hi)) << i;
  }
  // min > max: everything becomes max (the ONNX rule); NaN stays NaN.
  const Tensor nan_x = Tensor::from_vector<float>({3}, {-5.f, std::nanf(""), 5.f});
  const Tensor swapped = run1(make_node("Clip", {"X", "lo", "hi"}), {nan_x, hi, lo}, 13);
  EXPECT_EQ(swapped.data<float>()[0], -2.5f);
  EXPECT_EQ(swapped.data<float>()[2], -2.5f);
  const Tensor kept = run1(make_node("Clip", {"X", "lo", "hi"}), {nan_x, lo, hi}, 13);
  EXPECT_TRUE(std::isnan(kept.data<float>()[1]));
  EXPECT_EQ(kept.data<float>()[0], -2.5f);
}

TEST(Clip, IntegersAndBadBounds) {
  const Tensor x = Tensor::from_vector<int8_t>({4}, {-128, -3, 3, 127});
  const Node n = make_node("Clip", {"X", "", "hi"});
  EXPECT_EQ(run1(n, {x, Tensor(), Tensor::scalar<int8_t>(2)}, 13).to_int64_vector(),
            (std::vector<int64_t>{-128, -3, 2, 2}));
  const Node both = make_node("Clip", {"X", "lo", "hi"});
  EXPECT_EQ(
      run1(both,
           {Tensor::from_vector<int64_t>({3}, {-9, 0, 9}), Tensor::scalar<int64_t>(-1), Tensor::scalar<int64_t>(1)}, 13)
          .to_int64_vector(),
      (std::vector<int64_t>{-1, 0, 1}));
  expect_error<ShapeError>(
      [&] {
        run1(both, {Tensor::zeros(DType::Float32, {3}), Tensor::zeros(DType::Float32, {2}), Tensor::scalar<float>(1.f)},
             13);
      },
      "min 'lo' must be a scalar, got shape [2]");
  EXPECT_THROW(
      run1(both, {Tensor::zeros(DType::Float32, {3}), Tensor::scalar<double>(0), Tensor::scalar<float>(1.f)}, 13),
      TypeError);
}

TEST(PRelu, SlopeBroadcastsToX) {
  const Tensor x = sweep(-4, 4, 60).reshape({3, 4, 5});
  for (const Shape& ss : {Shape{3, 4, 5}, Shape{5}, Shape{3, 1, 1}, Shape{4, 1}, Shape{}}) {
    Tensor slope = Tensor::empty(DType::Float32, ss);
    for (int64_t i = 0; i < slope.numel(); ++i) slope.data<float>()[i] = 0.1f * static_cast<float>(i + 1);
    const Tensor y = run1(make_node("PRelu", {"X", "slope"}), {x, slope}, 16);
    ASSERT_EQ(y.shape(), x.shape());
    // Reference: the slope element numpy broadcasting pairs with each x element.
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t rem = i, off = 0, stride = 1;
      const Shape& xs = x.shape();
      for (size_t d = xs.size(); d-- > 0;) {
        const int64_t idx = rem % xs[d];
        rem /= xs[d];
        const size_t back = xs.size() - 1 - d;
        if (back < ss.size()) {
          const int64_t sd = ss[ss.size() - 1 - back];
          if (sd != 1) off += idx * stride;
          stride *= sd;
        }
      }
      const float xv = x.data<float>()[i];
      ASSERT_EQ(y.data<float>()[i], xv < 0 ? slope.data<float>()[off] * xv : xv) << to_string(ss) << " " << i;
    }
  }
  const Tensor yi = run1(make_node("PRelu", {"X", "slope"}),
                         {Tensor::from_vector<int32_t>({3}, {-4, 0, 4}), Tensor::scalar<int32_t>(3)}, 16);
  EXPECT_EQ(yi.to_int64_vector(), (std::vector<int64_t>{-12, 0, 4}));
}

TEST(PRelu, SlopeThatWouldGrowXIsAShapeError) {
  expect_error<ShapeError>(
      [&] {
        run1(make_node("PRelu", {"X", "slope"}),
             {Tensor::zeros(DType::Float32, {5}), Tensor::zeros(DType::Float32, {4, 5})});
      },
      {"[4, 5]", "[5]"});
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Celu is float32 in the spec; Kiln also runs float64 (gradient checks run in double). Its formula
// around 0, the alpha attribute, and the dtype check.
TEST(Celu, MatchesFormulaAndRejectsOtherDtypes) {
  for (float alpha : {1.0f, 0.5f, 2.5f}) {
    const Tensor x = sweep(-30, 30, 5000);
    const Tensor y = run1(make_node("Celu", {"X"}, {{"alpha", Attribute::of_float(alpha)}}), {x}, 12);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double xv = x.data<float>()[i];
      const double want = std::max(0.0, xv) + std::min(0.0, alpha * std::expm1(xv / alpha));
      ASSERT_NEAR(y.data<float>()[i], want, 1e-6 * std::fabs(want) + 1e-30) << "alpha " << alpha << " x=" << xv;
    }
  }
  EXPECT_THROW(run1(make_node("Celu", {"X"}), {Tensor::zeros(DType::Int64, {2})}, 12), Unsupported);
  expect_error<InvalidModel>(
      [&] {
        run1(make_node("Celu", {"X"}, {{"alpha", Attribute::of_float(0.f)}}), {Tensor::zeros(DType::Float32, {2})}, 12);
      },
      "alpha is 0");
}

// Shrink follows ONNX's reference, NaN included (neither comparison holds, so NaN gives 0), and
// runs integers through double like the reference's astype.
TEST(Shrink, FloatsIntegersAndNaN) {
  const Node n =
      make_node("Shrink", {"X"}, {{"lambd", Attribute::of_float(1.5f)}, {"bias", Attribute::of_float(0.5f)}});
  const Tensor x = Tensor::from_vector<float>({7}, {-3.f, -1.5f, -1.f, 0.f, 1.5f, 2.f, std::nanf("")});
  const Tensor y = run1(n, {x}, 9);
  const std::vector<float> want = {-2.5f, 0.f, 0.f, 0.f, 0.f, 1.5f, 0.f};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(y.data<float>()[i], want[i]) << i;
  const Tensor yi = run1(n, {Tensor::from_vector<int32_t>({5}, {-5, -2, 0, 2, 5})}, 9);
  EXPECT_EQ(yi.dtype(), DType::Int32);
  EXPECT_EQ(yi.to_int64_vector(), (std::vector<int64_t>{-4, -1, 0, 1, 4}));  // -4.5 -> -4, 1.5 -> 1 (truncation)
  EXPECT_THROW(run1(n, {Tensor::zeros(DType::Bool, {2})}, 9), Unsupported);
}

TEST(Gelu, RejectsUnknownApproximation) {
  expect_error<InvalidModel>(
      [&] {
        run1(make_node("Gelu", {"X"}, {{"approximate", Attribute::of_string("fast")}}),
             {Tensor::zeros(DType::Float32, {2})}, 20);
      },
      "approximate is 'fast'");
  EXPECT_THROW(run1(make_node("Mish", {"X"}), {Tensor::zeros(DType::Int64, {2})}, 18), Unsupported);
}

}  // namespace
}  // namespace kiln

// Binary arithmetic (Add, Sub, Mul, Div, Pow) and unary math (Neg ... Erf) through run_node, against
// references computed in double here: every broadcasting pattern, integer semantics, dtypes, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

Node make_node(const std::string& op, size_t inputs) {
  Node n;
  n.name = "n";
  n.op_type = op;
  for (size_t i = 0; i < inputs; ++i) n.inputs.push_back(i == 0 ? "A" : "B");
  n.outputs = {"Y"};
  return n;
}

Tensor run1(const std::string& op, const std::vector<Tensor>& in, int64_t opset = 17) {
  return run_node(make_node(op, in.size()), in, opset).at(0);
}

// Element of `t` that numpy broadcasting pairs with output element `linear` of shape `out`.
double broadcast_at(const Tensor& t, const Shape& out, int64_t linear) {
  return t.item_as_double(source_index(t.shape(), out, linear));
}

struct BroadcastCase {
  Shape a, b, out;
};

const std::vector<BroadcastCase> kBroadcastCases = {
    {{3, 4, 5}, {3, 4, 5}, {3, 4, 5}},  // same shape
    {{3, 4, 5}, {}, {3, 4, 5}},         // scalar right
    {{}, {3, 4, 5}, {3, 4, 5}},         // scalar left
    {{3, 4, 5}, {5}, {3, 4, 5}},        // trailing dim
    {{5}, {3, 4, 5}, {3, 4, 5}},        // trailing dim, other direction
    {{3, 1, 1}, {3, 4, 5}, {3, 4, 5}},  // leading dim
    {{2, 1, 4}, {3, 1}, {2, 3, 4}},     // both directions, rank differs
    {{4, 1}, {1, 5}, {4, 5}},           // outer product
    {{2, 3, 4}, {2, 1, 4}, {2, 3, 4}},  // middle dim
    {{}, {}, {}},                       // scalar and scalar
    {{1, 1}, {}, {1, 1}},               // all ones
    {{0, 3}, {3}, {0, 3}},              // empty
    {{64, 300}, {300}, {64, 300}},      // big enough to run on several threads
    {{2, 20000}, {2, 1}, {2, 20000}},   // big, broadcast along the long inner dim
    {{7, 1, 3000}, {1, 6, 1}, {7, 6, 3000}},
};

double apply(const std::string& op, double a, double b) {
  if (op == "Add") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  return a / b;
}

// Float +, -, *, / rounded once from double equal the float operation exactly, so the check is
// exact equality.
TEST(Elementwise, FloatArithmeticBroadcastsLikeNumpy) {
  uint32_t seed = 1;
  for (const std::string op : {"Add", "Sub", "Mul", "Div"}) {
    for (const BroadcastCase& c : kBroadcastCases) {
      const Tensor a = random_f32(c.a, seed++, -3.f, 3.f), b = random_f32(c.b, seed++, 0.5f, 4.f);
      const Tensor y = run1(op, {a, b});
      ASSERT_EQ(y.shape(), c.out) << op << " " << to_string(c.a) << " " << to_string(c.b);
      ASSERT_EQ(y.dtype(), DType::Float32);
      for (int64_t i = 0; i < y.numel(); ++i) {
        const float want = static_cast<float>(apply(op, broadcast_at(a, c.out, i), broadcast_at(b, c.out, i)));
        ASSERT_EQ(y.data<float>()[i], want) << op << " " << to_string(c.a) << " " << to_string(c.b) << " at " << i;
      }
    }
  }
}

TEST(Elementwise, DoubleHalfAndBFloat16Arithmetic) {
  const Tensor a = Tensor::from_vector<double>({2, 2}, {1.5, -2.25, 1e300, 3});
  const Tensor b = Tensor::from_vector<double>({2}, {0.5, 4});
  const Tensor y = run1("Mul", {a, b});
  EXPECT_EQ(y.data<double>()[1], -9.0);
  EXPECT_EQ(y.data<double>()[2], 5e299);

  const Tensor h = Tensor::from_vector<Half>({3}, {float_to_half(1.5f), float_to_half(-2.f), float_to_half(1000.f)});
  const Tensor hy = run1("Add", {h, Tensor::scalar<Half>(float_to_half(0.25f))});
  EXPECT_EQ(hy.dtype(), DType::Float16);
  EXPECT_EQ(hy.item_as_double(0), 1.75);
  EXPECT_EQ(hy.item_as_double(1), -1.75);
  EXPECT_EQ(hy.item_as_double(2), 1000.0);  // 1000.25 rounds to nearest even half (spacing 0.5)

  const Tensor bf = Tensor::from_vector<BFloat16>({2}, {float_to_bfloat16(3.f), float_to_bfloat16(-1.f)});
  const Tensor by = run1("Div", {bf, bf});
  EXPECT_EQ(by.dtype(), DType::BFloat16);
  EXPECT_EQ(by.item_as_double(0), 1.0);
  EXPECT_EQ(by.item_as_double(1), 1.0);
}

TEST(Elementwise, IntegerDivisionTruncatesTowardZero) {
  const Tensor a = Tensor::from_vector<int32_t>({4}, {7, -7, 7, -7});
  const Tensor b = Tensor::from_vector<int32_t>({4}, {2, 2, -2, -2});
  const Tensor y = run1("Div", {a, b});
  EXPECT_EQ(y.to_int64_vector(), (std::vector<int64_t>{3, -3, -3, 3}));

  const Tensor u = run1("Div", {Tensor::from_vector<uint8_t>({3}, {255, 7, 0}), Tensor::scalar<uint8_t>(2)});
  EXPECT_EQ(u.to_int64_vector(), (std::vector<int64_t>{127, 3, 0}));

  // INT_MIN / -1 overflows; it wraps (like numpy) rather than trapping.
  const Tensor m = run1("Div", {Tensor::scalar<int32_t>(INT32_MIN), Tensor::scalar<int32_t>(-1)});
  EXPECT_EQ(m.data<int32_t>()[0], INT32_MIN);
}

TEST(Elementwise, IntegerDivisionByZeroIsAnErrorNamingTheDivisor) {
  const Tensor a = Tensor::from_vector<int64_t>({3}, {1, 2, 3});
  const Tensor b = Tensor::from_vector<int64_t>({3}, {1, 5, 0});
  expect_error<InvalidArgument>([&] { run1("Div", {a, b}); }, {"'B'", "element 2", "node 'n' (Div)"});
  // Floats follow IEEE: no error.
  const Tensor f = run1("Div", {Tensor::from_vector<float>({2}, {1.f, -1.f}), Tensor::scalar<float>(0.f)});
  EXPECT_EQ(f.data<float>()[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(f.data<float>()[1], -std::numeric_limits<float>::infinity());
}

TEST(Elementwise, IntegerArithmeticWrapsLikeNumpy) {
  EXPECT_EQ(run1("Add", {Tensor::scalar<int64_t>(INT64_MAX), Tensor::scalar<int64_t>(1)}).data<int64_t>()[0],
            INT64_MIN);
  EXPECT_EQ(run1("Sub", {Tensor::scalar<uint8_t>(3), Tensor::scalar<uint8_t>(5)}).data<uint8_t>()[0], 254);
  EXPECT_EQ(run1("Mul", {Tensor::scalar<int16_t>(300), Tensor::scalar<int16_t>(300)}).data<int16_t>()[0],
            static_cast<int16_t>(90000 - 65536 * 1));
  EXPECT_EQ(run1("Mul", {Tensor::scalar<uint16_t>(65535), Tensor::scalar<uint16_t>(65535)}).data<uint16_t>()[0], 1);
  const Tensor a = Tensor::from_vector<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor y = run1("Sub", {a, Tensor::from_vector<int32_t>({3}, {10, 20, 30})});
  EXPECT_EQ(y.to_int64_vector(), (std::vector<int64_t>{-9, -18, -27, -6, -15, -24}));
}

TEST(Elementwise, IncompatibleBroadcastNamesBothInputsAndShapes) {
  expect_error<ShapeError>(
      [&] {
        run1("Add", {Tensor::zeros(DType::Float32, {2, 3}), Tensor::zeros(DType::Float32, {4})});
      },
      {"'A' [2, 3]", "'B' [4]"});
}

TEST(Elementwise, MixedDtypesAreATypeError) {
  EXPECT_THROW(run1("Add", {Tensor::zeros(DType::Float32, {2}), Tensor::zeros(DType::Float64, {2})}), TypeError);
  EXPECT_THROW(run1("Add", {Tensor::zeros(DType::Bool, {2}), Tensor::zeros(DType::Bool, {2})}), Unsupported);
}

TEST(Elementwise, InplaceInputIsTheOneWithTheOutputShape) {
  auto inplace = [](const Shape& a, const Shape& b) {
    Node n = make_node("Mul", 2);
    auto k = KernelRegistry::global().resolve("", "Mul", 14, DType::Float32).create(n);
    InferContext ctx{n, 14, {TensorMeta{DType::Float32, a, false, {}}, TensorMeta{DType::Float32, b, false, {}}}};
    k->infer(ctx);
    return k->inplace_input();
  };
  EXPECT_EQ(inplace({3, 4}, {4}), std::optional<size_t>(0));
  EXPECT_EQ(inplace({4}, {3, 4}), std::optional<size_t>(1));
  EXPECT_EQ(inplace({3, 1}, {1, 4}), std::nullopt);
}

// Output written over an input buffer, as the planner arranges for dying inputs.
TEST(Elementwise, ComputesCorrectlyInPlace) {
  for (const std::string op : {"Sub", "Exp"}) {
    Node n = make_node(op, op == "Exp" ? 1 : 2);
    auto k = KernelRegistry::global().resolve("", op, 17, DType::Float32).create(n);
    const Tensor a0 = random_f32({5, 4000}, 3, -3.f, 3.f);
    Tensor a = a0.clone();
    const Tensor b = random_f32({4000}, 4, -3.f, 3.f);
    InferContext ictx{n, 17, {TensorMeta::of(a)}};
    if (op == "Sub") ictx.inputs.push_back(TensorMeta::of(b));
    const auto metas = k->infer(ictx);
    k->prepare(ictx, metas);
    ASSERT_EQ(k->inplace_input(), std::optional<size_t>(0));
    ComputeContext cctx{n, {&a}, {&a}};
    if (op == "Sub") cctx.inputs.push_back(&b);
    k->compute(cctx);
    for (int64_t i = 0; i < a.numel(); ++i) {
      const double x = a0.data<float>()[i];
      const double want = op == "Sub" ? x - b.data<float>()[i % 4000] : std::exp(x);
      ASSERT_NEAR(a.data<float>()[i], want, 1e-6 * std::fabs(want)) << op << " " << i;
    }
  }
}

TEST(Pow, FloatMatchesDoubleReferenceAndBroadcasts) {
  const Tensor a = random_f32({3, 4, 5}, 10, 0.1f, 3.f);
  for (const Shape& es : {Shape{3, 4, 5}, Shape{5}, Shape{}}) {
    const Tensor e = random_f32(es, 11, -2.f, 2.f);
    const Tensor y = run1("Pow", {a, e}, 15);
    ASSERT_EQ(y.shape(), (Shape{3, 4, 5}));
    for (int64_t i = 0; i < y.numel(); ++i) {
      const float want = static_cast<float>(std::pow(broadcast_at(a, y.shape(), i), broadcast_at(e, y.shape(), i)));
      ASSERT_EQ(y.data<float>()[i], want) << to_string(es) << " at " << i;
    }
  }
  // x^2 takes a fast path that must equal the general one: x * x.
  const Tensor sq = run1("Pow", {a, Tensor::scalar<float>(2.f)}, 15);
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(sq.data<float>()[i], a.data<float>()[i] * a.data<float>()[i]);
  // Negative base with integral exponent, and NaN for a fractional one.
  const Tensor n =
      run1("Pow", {Tensor::from_vector<float>({2}, {-2.f, -2.f}), Tensor::from_vector<float>({2}, {3.f, 0.5f})}, 15);
  EXPECT_EQ(n.data<float>()[0], -8.f);
  EXPECT_TRUE(std::isnan(n.data<float>()[1]));
}

TEST(Pow, MixedDtypesFollowTheBase) {
  const Tensor xf = Tensor::from_vector<float>({3}, {1.f, 2.f, 3.f});
  const Tensor xi = Tensor::from_vector<int32_t>({3}, {1, 2, 3});
  const Tensor e64 = Tensor::from_vector<int64_t>({3}, {4, 5, 6});
  const Tensor ef = Tensor::from_vector<float>({3}, {4.f, 5.f, 6.f});

  const Tensor a = run1("Pow", {xf, e64}, 15);
  EXPECT_EQ(a.dtype(), DType::Float32);
  EXPECT_EQ(a.to_int64_vector(), (std::vector<int64_t>{1, 32, 729}));

  const Tensor b = run1("Pow", {xi, ef}, 15);
  EXPECT_EQ(b.dtype(), DType::Int32);
  EXPECT_EQ(b.to_int64_vector(), (std::vector<int64_t>{1, 32, 729}));

  const Tensor c = run1(
      "Pow", {Tensor::from_vector<int64_t>({4}, {3, -3, 2, 10}), Tensor::from_vector<int64_t>({4}, {3, 3, 62, 0})}, 15);
  EXPECT_EQ(c.to_int64_vector(), (std::vector<int64_t>{27, -27, int64_t{1} << 62, 1}));

  // Negative integer exponents truncate 1/x^n toward zero; 0 to a negative power is an error.
  const Tensor d = run1("Pow", {Tensor::from_vector<int32_t>({3}, {1, -1, 2}), Tensor::scalar<int32_t>(-3)}, 15);
  EXPECT_EQ(d.to_int64_vector(), (std::vector<int64_t>{1, -1, 0}));
  EXPECT_THROW(run1("Pow", {Tensor::scalar<int32_t>(0), Tensor::scalar<int32_t>(-1)}, 15), InvalidArgument);

  const Tensor h = run1(
      "Pow", {Tensor::from_vector<Half>({2}, {float_to_half(1.5f), float_to_half(-2.f)}), Tensor::scalar<uint8_t>(2)},
      15);
  EXPECT_EQ(h.dtype(), DType::Float16);
  EXPECT_EQ(h.item_as_double(0), 2.25);
  EXPECT_EQ(h.item_as_double(1), 4.0);
}

struct UnaryCase {
  std::string op;
  double (*ref)(double);
  float lo, hi;
  double rtol;  // 0: exact (the float result is the correctly rounded one)
  double atol = 0;
};

TEST(Unary, Float32MatchesDoubleReference) {
  const std::vector<UnaryCase> cases = {
      {"Neg", [](double x) { return -x; }, -5, 5, 0},
      {"Abs", [](double x) { return std::fabs(x); }, -5, 5, 0},
      {"Sqrt", [](double x) { return std::sqrt(x); }, 0, 100, 0},
      {"Exp", [](double x) { return std::exp(x); }, -104, 88, 1e-6, 2 * std::numeric_limits<float>::min()},
      {"Log", [](double x) { return std::log(x); }, 1e-30f, 1e30f, 1e-6},
      {"Log", [](double x) { return std::log(x); }, 0.5f, 2.f, 1e-6, 1e-8},  // outputs near 0
      {"Reciprocal", [](double x) { return 1.0 / x; }, 0.01f, 100, 0},
      {"Floor", [](double x) { return std::floor(x); }, -50, 50, 0},
      {"Ceil", [](double x) { return std::ceil(x); }, -50, 50, 0},
      {"Erf", [](double x) { return std::erf(x); }, -4, 4, 1e-6},
  };
  for (const UnaryCase& c : cases) {
    for (const Shape& shape : {Shape{3, 4, 5}, Shape{50000}}) {
      const Tensor x = random_f32(shape, 7, c.lo, c.hi);
      const Tensor y = run1(c.op, {x}, 13);
      ASSERT_EQ(y.shape(), shape);
      for (int64_t i = 0; i < y.numel(); ++i) {
        const double want = c.ref(x.data<float>()[i]);
        if (c.rtol == 0) ASSERT_EQ(y.data<float>()[i], static_cast<float>(want)) << c.op << " x=" << x.data<float>()[i];
        else
          ASSERT_NEAR(y.data<float>()[i], want, c.rtol * std::fabs(want) + c.atol)
              << c.op << " x=" << x.data<float>()[i];
      }
    }
  }
}

TEST(Unary, OtherDtypesAndSpecialValues) {
  const Tensor i8 = Tensor::from_vector<int8_t>({3}, {-128, -5, 7});
  EXPECT_EQ(run1("Neg", {i8}).to_int64_vector(), (std::vector<int64_t>{-128, 5, -7}));  // wraps as numpy
  EXPECT_EQ(run1("Abs", {i8}).to_int64_vector(), (std::vector<int64_t>{-128, 5, 7}));
  EXPECT_EQ(run1("Abs", {Tensor::from_vector<uint32_t>({2}, {0, 4000000000u})}).to_int64_vector(),
            (std::vector<int64_t>{0, 4000000000}));
  const Tensor d = run1("Sqrt", {Tensor::from_vector<double>({2}, {2.0, -1.0})});
  EXPECT_EQ(d.data<double>()[0], std::sqrt(2.0));
  EXPECT_TRUE(std::isnan(d.data<double>()[1]));
  const Tensor h = run1("Exp", {Tensor::from_vector<Half>({2}, {float_to_half(0.f), float_to_half(1.f)})});
  EXPECT_EQ(h.item_as_double(0), 1.0);
  EXPECT_EQ(h.data<Half>()[1].bits, float_to_half(std::exp(1.f)).bits);
  const Tensor f = run1("Log", {Tensor::from_vector<float>({3}, {0.f, -1.f, std::numeric_limits<float>::infinity()})});
  EXPECT_EQ(f.data<float>()[0], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f.data<float>()[1]));
  EXPECT_EQ(f.data<float>()[2], std::numeric_limits<float>::infinity());
  const Tensor e = run1("Floor", {Tensor::zeros(DType::Float32, {0, 4})});
  EXPECT_EQ(e.shape(), (Shape{0, 4}));
  EXPECT_EQ(run1("Ceil", {Tensor::scalar<float>(-0.5f)}).data<float>()[0], 0.f);
  EXPECT_THROW(run1("Sqrt", {Tensor::zeros(DType::Int32, {2})}), Unsupported);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

Tensor run_mod(const Tensor& a, const Tensor& b, int64_t fmod) {
  Node n = make_node("Mod", 2);
  n.attrs["fmod"] = Attribute::of_int(fmod);
  return run_node(n, {a, b}, 13).at(0);
}

// Python's % (sign of the divisor) for fmod=0, C's fmod (sign of the dividend) for fmod=1, on every
// sign combination, with broadcasting; INT_MIN % -1 is 0 rather than a trap.
TEST(Mod, IntegerSemanticsOfBothModes) {
  const std::vector<int64_t> as = {7, -7, 7, -7, 0, 6, std::numeric_limits<int32_t>::min()};
  const std::vector<int64_t> bs = {3, 3, -3, -3, 5, 3, -1};
  std::vector<int32_t> a32(as.begin(), as.end()), b32(bs.begin(), bs.end());
  const Tensor a = Tensor::from_vector<int32_t>({7}, a32), b = Tensor::from_vector<int32_t>({7}, b32);
  EXPECT_EQ(run_mod(a, b, 0).to_int64_vector(), (std::vector<int64_t>{1, 2, -2, -1, 0, 0, 0}));
  EXPECT_EQ(run_mod(a, b, 1).to_int64_vector(), (std::vector<int64_t>{1, -1, 1, -1, 0, 0, 0}));
  // Broadcast divisor, uint8.
  const Tensor u = Tensor::from_vector<uint8_t>({2, 2}, {250, 7, 9, 3});
  EXPECT_EQ(run_mod(u, Tensor::from_vector<uint8_t>({2}, {7, 4}), 0).to_int64_vector(),
            (std::vector<int64_t>{5, 3, 2, 3}));
}

TEST(Mod, FloatIsCFmodAndNeedsFmod1) {
  const std::vector<double> as = {5.5, -5.5, 5.5, -5.5, 1.0, 3.0};
  const std::vector<double> bs = {2.0, 2.0, -2.0, -2.0, 0.0, std::numeric_limits<double>::infinity()};
  const Tensor y = run_mod(Tensor::from_vector<double>({6}, as), Tensor::from_vector<double>({6}, bs), 1);
  for (size_t i = 0; i < as.size(); ++i) {
    const double want = std::fmod(as[i], bs[i]);
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(y.data<double>()[i])) << i;
    else EXPECT_EQ(y.data<double>()[i], want) << i;
  }
  const Tensor h = run_mod(Tensor::from_vector<Half>({1}, {float_to_half(-7.5f)}),
                           Tensor::from_vector<Half>({1}, {float_to_half(2.f)}), 1);
  EXPECT_EQ(h.item_as_double(), -1.5);
  expect_error<InvalidModel>(
      [&] { run_mod(Tensor::zeros(DType::Float32, {2}), Tensor::zeros(DType::Float32, {2}), 0); },
      "fmod=0 (integer remainder) given for float inputs 'A' and 'B'");
  expect_error<InvalidArgument>(
      [&] {
        run_mod(Tensor::from_vector<int64_t>({2}, {1, 2}), Tensor::from_vector<int64_t>({2}, {1, 0}), 0);
      },
      "divisor 'B' (int64[2]) is 0 at element 1");
  EXPECT_THROW(run_mod(Tensor::zeros(DType::Int32, {2}), Tensor::zeros(DType::Int64, {2}), 1), TypeError);
}

TEST(Sign, AllDtypesAndSpecialValues) {
  const Tensor f =
      Tensor::from_vector<float>({6}, {-2.5f, -0.f, 0.f, 3.f, -std::numeric_limits<float>::infinity(), std::nanf("")});
  const Tensor y = run1("Sign", {f}, 13);
  EXPECT_EQ(y.data<float>()[0], -1.f);
  EXPECT_EQ(y.data<float>()[1], 0.f);
  EXPECT_EQ(y.data<float>()[2], 0.f);
  EXPECT_EQ(y.data<float>()[3], 1.f);
  EXPECT_EQ(y.data<float>()[4], -1.f);
  EXPECT_TRUE(std::isnan(y.data<float>()[5]));
  EXPECT_EQ(run1("Sign", {Tensor::from_vector<int8_t>({3}, {-128, 0, 127})}).to_int64_vector(),
            (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(run1("Sign", {Tensor::from_vector<uint64_t>({2}, {0, 9})}).to_int64_vector(), (std::vector<int64_t>{0, 1}));
  EXPECT_THROW(run1("Sign", {Tensor::zeros(DType::Bool, {2})}), Unsupported);
}

// Half to even, which differs from std::round at every .5 with an even floor.
TEST(Round, HalfToEven) {
  const std::vector<float> xs = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 2.4f, 2.6f, -2.6f, 1e8f, 8388609.f, -0.4f};
  const std::vector<float> want = {0.f, 2.f, 2.f, -0.f, -2.f, -2.f, 2.f, 3.f, -3.f, 1e8f, 8388609.f, -0.f};
  const Tensor y = run1("Round", {Tensor::from_vector<float>({12}, xs)}, 11);
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(y.data<float>()[i], want[i]) << xs[i];
    EXPECT_EQ(std::signbit(y.data<float>()[i]), std::signbit(want[i])) << xs[i];
  }
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor s = run1("Round", {Tensor::from_vector<float>({3}, {inf, -inf, std::nanf("")})}, 11);
  EXPECT_EQ(s.data<float>()[0], inf);
  EXPECT_EQ(s.data<float>()[1], -inf);
  EXPECT_TRUE(std::isnan(s.data<float>()[2]));
  EXPECT_EQ(run1("Round", {Tensor::from_vector<double>({2}, {4.5, 5.5})}, 11).to_int64_vector(),
            (std::vector<int64_t>{4, 6}));
  EXPECT_THROW(run1("Round", {Tensor::zeros(DType::Int32, {2})}, 11), Unsupported);
}

TEST(BitShift, BothDirectionsAndOversizedShifts) {
  Node left = make_node("BitShift", 2);
  left.attrs["direction"] = Attribute::of_string("LEFT");
  Node right = left;
  right.attrs["direction"] = Attribute::of_string("RIGHT");
  const Tensor x = Tensor::from_vector<uint8_t>({4}, {1, 255, 16, 3});
  const Tensor s = Tensor::from_vector<uint8_t>({4}, {1, 4, 8, 200});
  EXPECT_EQ(run_node(left, {x, s}, 11).at(0).to_int64_vector(), (std::vector<int64_t>{2, 240, 0, 0}));
  EXPECT_EQ(run_node(right, {x, s}, 11).at(0).to_int64_vector(), (std::vector<int64_t>{0, 15, 0, 0}));
  const Tensor big = Tensor::from_vector<uint64_t>({2}, {1, 1});
  const Tensor bs = Tensor::from_vector<uint64_t>({2}, {63, 64});
  const Tensor y = run_node(left, {big, bs}, 11).at(0);
  EXPECT_EQ(y.data<uint64_t>()[0], uint64_t{1} << 63);
  EXPECT_EQ(y.data<uint64_t>()[1], 0u);
  Node bad = left;
  bad.attrs["direction"] = Attribute::of_string("left");
  expect_error<InvalidModel>([&] { run_node(bad, {x, s}, 11); }, "direction is 'left'");
  EXPECT_THROW(run_node(left, {Tensor::zeros(DType::Int32, {2}), Tensor::zeros(DType::Int32, {2})}, 11), Unsupported);
}

}  // namespace
}  // namespace kiln

// Comparisons, logical ops, IsNaN/IsInf and Where through run_node: every broadcasting pattern
// against a per-element reference, NaN and ±inf, dtypes, and rejected inputs.
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

// Small integers as floats, so equality is frequent, plus NaN and ±inf.
Tensor values(const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(-3, 3);
  Tensor t = Tensor::empty(DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(d(gen));
  const float specials[] = {std::nanf(""), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (int64_t i = 0; i < t.numel() && i < 3; ++i) t.data<float>()[i * 7 % t.numel()] = specials[i];
  return t;
}

const std::vector<std::array<Shape, 3>> kShapes = {
    {Shape{3, 4, 5}, Shape{3, 4, 5}, Shape{3, 4, 5}},
    {Shape{3, 4, 5}, Shape{}, Shape{3, 4, 5}},
    {Shape{5}, Shape{3, 4, 5}, Shape{3, 4, 5}},
    {Shape{2, 1, 4}, Shape{3, 1}, Shape{2, 3, 4}},
    {Shape{0, 3}, Shape{3}, Shape{0, 3}},
    {Shape{70, 300}, Shape{300}, Shape{70, 300}},
};

TEST(Compare, AllComparisonsUnderBroadcasting) {
  const std::vector<std::pair<std::string, bool (*)(float, float)>> ops = {
      {"Equal", [](float a, float b) { return a == b; }},
      {"Less", [](float a, float b) { return a < b; }},
      {"Greater", [](float a, float b) { return a > b; }},
      {"LessOrEqual", [](float a, float b) { return a <= b; }},
      {"GreaterOrEqual", [](float a, float b) { return a >= b; }},
  };
  for (const auto& [op, ref] : ops)
    for (const auto& s : kShapes) {
      const Tensor a = values(s[0], 1), b = values(s[1], 2);
      const Tensor y = run1(make_node(op, {"A", "B"}), {a, b});
      ASSERT_EQ(y.dtype(), DType::Bool);
      ASSERT_EQ(y.shape(), s[2]) << op;
      for (int64_t i = 0; i < y.numel(); ++i)
        ASSERT_EQ(y.data<bool>()[i],
                  ref(a.data<float>()[source_index(s[0], s[2], i)], b.data<float>()[source_index(s[1], s[2], i)]))
            << op << " " << to_string(s[0]) << " vs " << to_string(s[1]) << " at " << i;
    }
}

TEST(Compare, IntegerHalfAndBoolDtypes) {
  const Tensor a = Tensor::from_vector<int64_t>({3}, {std::numeric_limits<int64_t>::max(), -1, 5});
  const Tensor b = Tensor::from_vector<int64_t>({3}, {std::numeric_limits<int64_t>::max() - 1, -1, 6});
  EXPECT_EQ(run1(make_node("Greater", {"A", "B"}), {a, b}).to_int64_vector(), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(run1(make_node("Equal", {"A", "B"}), {a, b}).to_int64_vector(), (std::vector<int64_t>{0, 1, 0}));
  const Tensor u = Tensor::from_vector<uint32_t>({2}, {0, 4000000000u});
  EXPECT_EQ(run1(make_node("Less", {"A", "B"}), {u, Tensor::from_vector<uint32_t>({1}, {1})}).to_int64_vector(),
            (std::vector<int64_t>{1, 0}));
  const Tensor h = Tensor::from_vector<Half>({2}, {float_to_half(0.5f), float_to_half(-1.f)});
  EXPECT_EQ(run1(make_node("GreaterOrEqual", {"A", "B"}), {h, Tensor::from_vector<Half>({}, {float_to_half(0.5f)})})
                .to_int64_vector(),
            (std::vector<int64_t>{1, 0}));
  const Tensor t = Tensor::from_vector<bool>({2}, {true, false});
  EXPECT_EQ(run1(make_node("Equal", {"A", "B"}), {t, Tensor::from_vector<bool>({}, {false})}).to_int64_vector(),
            (std::vector<int64_t>{0, 1}));
  // Ordering bools is not in the spec.
  EXPECT_THROW(run1(make_node("Less", {"A", "B"}), {t, t}), Unsupported);
}

TEST(Compare, RejectsMixedDtypesAndBadShapes) {
  expect_error<TypeError>(
      [&] {
        run1(make_node("Less", {"A", "B"}), {Tensor::zeros(DType::Float32, {2}), Tensor::zeros(DType::Float64, {2})});
      },
      "inputs 'A' (float) and 'B' (double) must have the same dtype");
  expect_error<ShapeError>(
      [&] {
        run1(make_node("Equal", {"A", "B"}),
             {Tensor::zeros(DType::Float32, {2, 3}), Tensor::zeros(DType::Float32, {4})});
      },
      "'A' [2, 3], 'B' [4]");
}

TEST(Logic, TruthTablesAndBroadcast) {
  const Tensor a = Tensor::from_vector<bool>({2, 2}, {false, false, true, true});
  const Tensor b = Tensor::from_vector<bool>({2}, {false, true});
  EXPECT_EQ(run1(make_node("And", {"A", "B"}), {a, b}).to_int64_vector(), (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_EQ(run1(make_node("Or", {"A", "B"}), {a, b}).to_int64_vector(), (std::vector<int64_t>{0, 1, 1, 1}));
  EXPECT_EQ(run1(make_node("Xor", {"A", "B"}), {a, b}).to_int64_vector(), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(run1(make_node("Not", {"A"}), {a}).to_int64_vector(), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_THROW(run1(make_node("And", {"A", "B"}), {Tensor::zeros(DType::Int32, {2}), Tensor::zeros(DType::Int32, {2})}),
               Unsupported);
  EXPECT_THROW(run1(make_node("Not", {"A"}), {Tensor::zeros(DType::Float32, {2})}), Unsupported);
}

TEST(FloatTests, IsNaNAndIsInfWithDirections) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from_vector<float>({5}, {1.f, std::nanf(""), inf, -inf, -0.f});
  EXPECT_EQ(run1(make_node("IsNaN", {"X"}), {x}).to_int64_vector(), (std::vector<int64_t>{0, 1, 0, 0, 0}));
  EXPECT_EQ(run1(make_node("IsInf", {"X"}), {x}).to_int64_vector(), (std::vector<int64_t>{0, 0, 1, 1, 0}));
  EXPECT_EQ(run1(make_node("IsInf", {"X"}, {{"detect_negative", Attribute::of_int(0)}}), {x}).to_int64_vector(),
            (std::vector<int64_t>{0, 0, 1, 0, 0}));
  EXPECT_EQ(run1(make_node("IsInf", {"X"}, {{"detect_positive", Attribute::of_int(0)}}), {x}).to_int64_vector(),
            (std::vector<int64_t>{0, 0, 0, 1, 0}));
  const Tensor d = Tensor::from_vector<double>({2}, {std::nan(""), 1e308 * 10});
  EXPECT_EQ(run1(make_node("IsNaN", {"X"}), {d}).to_int64_vector(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(run1(make_node("IsInf", {"X"}), {d}).to_int64_vector(), (std::vector<int64_t>{0, 1}));
  EXPECT_THROW(run1(make_node("IsNaN", {"X"}), {Tensor::zeros(DType::Int32, {2})}), Unsupported);
}

TEST(Where, ThreeWayBroadcast) {
  const std::vector<std::array<Shape, 4>> shapes = {
      {Shape{3, 4}, Shape{3, 4}, Shape{3, 4}, Shape{3, 4}},
      {Shape{4}, Shape{3, 1}, Shape{}, Shape{3, 4}},
      {Shape{2, 1, 1}, Shape{1, 3, 1}, Shape{1, 1, 5}, Shape{2, 3, 5}},
      {Shape{}, Shape{0}, Shape{1}, Shape{0}},
      {Shape{40, 1}, Shape{1, 1000}, Shape{40, 1000}, Shape{40, 1000}},
      // Each operand contiguous or constant along the inner run: all 8 patterns of where_run.
      {Shape{}, Shape{}, Shape{}, Shape{}},
      {Shape{37}, Shape{}, Shape{}, Shape{37}},
      {Shape{}, Shape{37}, Shape{}, Shape{37}},
      {Shape{}, Shape{}, Shape{37}, Shape{37}},
      {Shape{1, 1, 9, 9}, Shape{}, Shape{2, 3, 9, 9}, Shape{2, 3, 9, 9}},  // a causal mask over scores
      {Shape{37}, Shape{37}, Shape{}, Shape{37}},
      {Shape{5, 1}, Shape{5, 37}, Shape{5, 37}, Shape{5, 37}},
  };
  for (const auto& s : shapes) {
    Tensor c = Tensor::empty(DType::Bool, s[0]);
    for (int64_t i = 0; i < c.numel(); ++i) c.data<bool>()[i] = (i * 7 + 3) % 3 == 0;
    const Tensor x = values(s[1], 3), y = values(s[2], 4);
    const Tensor out = run1(make_node("Where", {"C", "X", "Y"}), {c, x, y}, 16);
    ASSERT_EQ(out.shape(), s[3]);
    for (int64_t i = 0; i < out.numel(); ++i) {
      const float want = c.data<bool>()[source_index(s[0], s[3], i)] ? x.data<float>()[source_index(s[1], s[3], i)]
                                                                     : y.data<float>()[source_index(s[2], s[3], i)];
      const float got = out.data<float>()[i];
      ASSERT_TRUE(got == want || (std::isnan(got) && std::isnan(want))) << to_string(s[3]) << " at " << i;
    }
  }
  const Tensor yi = run1(make_node("Where", {"C", "X", "Y"}),
                         {Tensor::from_vector<bool>({2}, {true, false}), Tensor::from_vector<int64_t>({2}, {1, 2}),
                          Tensor::from_vector<int64_t>({}, {-9})});
  EXPECT_EQ(yi.to_int64_vector(), (std::vector<int64_t>{1, -9}));
}

TEST(Where, RejectsNonBoolConditionAndMixedValues) {
  expect_error<TypeError>(
      [&] {
        const Tensor x = Tensor::zeros(DType::Float32, {2});
        run1(make_node("Where", {"C", "X", "Y"}), {Tensor::zeros(DType::Int32, {2}), x, x});
      },
      "condition 'C' is int32; it must be bool");
  expect_error<TypeError>(
      [&] {
        run1(make_node("Where", {"C", "X", "Y"}),
             {Tensor::zeros(DType::Bool, {2}), Tensor::zeros(DType::Float32, {2}), Tensor::zeros(DType::Int64, {2})});
      },
      "X 'X' (float) and Y 'Y' (int64) must have the same dtype");
  EXPECT_THROW(
      run1(make_node("Where", {"C", "X", "Y"}),
           {Tensor::zeros(DType::Bool, {3}), Tensor::zeros(DType::Float32, {2}), Tensor::zeros(DType::Float32, {2})}),
      ShapeError);
}

}  // namespace
}  // namespace kiln

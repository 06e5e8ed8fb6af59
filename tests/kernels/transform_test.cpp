// Transpose, Concat, Slice, Split through run_node, against hand-computed values and against
// Tensor::permute (an independent strided copy).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>
#include <random>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

std::vector<int64_t> values(const Tensor& t) {
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}
Tensor arange(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return ints(v);
}

Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  return run_node(make_node("Transpose", 1, {{"perm", Attribute::of_ints(perm)}}), {x}, 13)[0];
}

TEST(Transpose, DefaultPermReversesAxesForEveryDtype) {
  for (DType dt : kAllDTypes) {
    const Tensor x = filled(dt, {2, 3, 4});
    const Tensor y = run_node(make_node("Transpose", 1), {x}, 13)[0];
    EXPECT_EQ(y.shape(), (Shape{4, 3, 2})) << dtype_name(dt);
    expect_bytes_equal(y, x.permute({2, 1, 0}).contiguous());
  }
}

TEST(Transpose, EveryPermutationOfRank4MatchesAStridedView) {
  for (DType dt : {DType::Float32, DType::Int8, DType::Float16, DType::Int64}) {
    const Tensor x = filled(dt, {2, 3, 4, 5});
    std::vector<int64_t> perm = {0, 1, 2, 3};
    do {
      expect_bytes_equal(transpose(x, perm), x.permute(perm).contiguous());
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
}

TEST(Transpose, LargeShapesTakeTheTiledAndRowPaths) {
  // 2-D (tiled, parallel), batched 2-D (tiled), last axis kept (row copies), size-1 dims.
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {{{300, 517}, {1, 0}},
                                                                     {{3, 64, 40}, {0, 2, 1}},
                                                                     {{4, 70, 3, 33}, {0, 2, 1, 3}},
                                                                     {{1, 5, 1, 7}, {3, 2, 1, 0}},
                                                                     {{9, 200, 1, 31}, {2, 1, 3, 0}},
                                                                     // bert's attention gradient: a middle dim
                                                                     // transposed with the last, tiles cut short
                                                                     {{6, 20, 37}, {2, 0, 1}},
                                                                     {{5, 4, 3, 70}, {3, 1, 0, 2}},
                                                                     {{256, 96}, {1, 0}}};
  for (const auto& [shape, perm] : cases) {
    for (DType dt : {DType::Float32, DType::Uint8, DType::Float64}) {
      const Tensor x = filled(dt, shape, 3);
      expect_bytes_equal(transpose(x, perm), x.permute(perm).contiguous());
    }
  }
}

TEST(Transpose, EmptyScalarAndBadPerm) {
  EXPECT_EQ(transpose(Tensor::empty(DType::Float32, {0, 3}), {1, 0}).shape(), (Shape{3, 0}));
  EXPECT_EQ(run_node(make_node("Transpose", 1), {Tensor::scalar<int32_t>(5)}, 13)[0].item_as_double(), 5.0);
  expect_error<InvalidModel>(
      [&] {
        run_node(make_node("Transpose", 1, {{"perm", Attribute::of_ints({0, 0, 1})}}),
                 {filled(DType::Float32, {2, 3, 4})}, 13);
      },
      "perm [0, 0, 1] is not a permutation of the 3 axes of input shape [2, 3, 4]");
}

TEST(Concat, MiddleAxisWithAnEmptyInputForEveryDtype) {
  for (DType dt : kAllDTypes) {
    const Tensor a = filled(dt, {2, 1, 3}, 0), b = filled(dt, {2, 0, 3}, 0), c = filled(dt, {2, 2, 3}, 50);
    const Tensor y = run_node(make_node("Concat", 3, {{"axis", Attribute::of_int(1)}}), {a, b, c}, 13)[0];
    ASSERT_EQ(y.shape(), (Shape{2, 3, 3})) << dtype_name(dt);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 3; ++k) {
          const double want = j == 0 ? a.item_as_double(i * 3 + k) : c.item_as_double((i * 2 + j - 1) * 3 + k);
          EXPECT_EQ(y.item_as_double((i * 3 + j) * 3 + k), want) << dtype_name(dt) << " at " << i << j << k;
        }
  }
}

TEST(Concat, NegativeAxisAndOneDimensional) {
  const Tensor y =
      run_node(make_node("Concat", 2, {{"axis", Attribute::of_int(-1)}}), {ints({1, 2}), ints({3})}, 13)[0];
  EXPECT_EQ(values(y), (std::vector<int64_t>{1, 2, 3}));
  const Tensor a = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4}), b = Tensor::from_vector<float>({2, 1}, {5, 6});
  const Tensor z = run_node(make_node("Concat", 2, {{"axis", Attribute::of_int(-1)}}), {a, b}, 13)[0];
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  const std::vector<float> want = {1, 2, 5, 3, 4, 6};
  EXPECT_EQ(std::vector<float>(z.data<float>(), z.data<float>() + 6), want);
}

TEST(Concat, MismatchedShapesAndDtypesAreErrors) {
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("Concat", 2, {{"axis", Attribute::of_int(0)}}),
                 {filled(DType::Float32, {2, 3}), filled(DType::Float32, {2, 4})}, 13);
      },
      "input 1 has shape [2, 4], which does not match input 0's shape [2, 3] outside axis 0");
  EXPECT_THROW(run_node(make_node("Concat", 2, {{"axis", Attribute::of_int(0)}}),
                        {filled(DType::Float32, {2}), filled(DType::Int32, {2})}, 13),
               TypeError);
  EXPECT_THROW(run_node(make_node("Concat", 2, {{"axis", Attribute::of_int(2)}}),
                        {filled(DType::Float32, {2, 3}), filled(DType::Float32, {2, 3})}, 13),
               ShapeError);
}

std::vector<int64_t> slice1d(int64_t start, int64_t end, int64_t step, int64_t n = 10) {
  return values(
      run_node(make_node("Slice", 5), {arange(n), ints({start}), ints({end}), ints({0}), ints({step})}, 13)[0]);
}

TEST(Slice, ClampsStartsAndEndsExactlyAsTheSpec) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(slice1d(2, 5, 1), (V{2, 3, 4}));
  EXPECT_EQ(slice1d(-3, INT64_MAX, 1), (V{7, 8, 9}));
  EXPECT_EQ(slice1d(-1, INT64_MIN, -1), (V{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(slice1d(100, -100, -3), (V{9, 6, 3, 0}));
  EXPECT_EQ(slice1d(-100, 100, 1), (V{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(slice1d(5, 2, 1), V{});
  EXPECT_EQ(slice1d(2, 5, -1), V{});
  EXPECT_EQ(slice1d(8, 1, -2), (V{8, 6, 4, 2}));
  EXPECT_EQ(slice1d(8, -1, -1), V{});  // end -1 means dim-1 = 9, behind the start
  EXPECT_EQ(slice1d(3, INT64_MAX, INT64_MAX), (V{3}));
  EXPECT_EQ(slice1d(3, INT64_MIN, INT64_MIN), (V{3}));
  EXPECT_EQ(slice1d(0, 10, 3), (V{0, 3, 6, 9}));
  // The spec clamps a negative-step start into [0, dim-1] (numpy would give an empty slice here).
  EXPECT_EQ(slice1d(-12, -20, -1), (V{0}));
  EXPECT_EQ(slice1d(INT64_MIN, INT64_MAX, 1, 0), V{});  // empty input
  EXPECT_EQ(slice1d(-1, INT64_MIN, -1, 0), V{});
}

TEST(Slice, AxesStepsAndInt32Inputs) {
  const Tensor x = Tensor::from_vector<float>({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  auto i32 = [](std::vector<int32_t> v) { return Tensor::from_vector<int32_t>({static_cast<int64_t>(v.size())}, v); };
  const Tensor y =
      run_node(make_node("Slice", 5), {x, i32({0, 1}), i32({INT32_MAX, 3}), i32({-2, 1}), i32({2, 1})}, 13)[0];
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(std::vector<float>(y.data<float>(), y.data<float>() + 4), (std::vector<float>{1, 2, 9, 10}));
  // Axes and steps omitted: starts/ends cover the leading axes.
  const Tensor z = run_node(make_node("Slice", 3), {x, ints({1}), ints({3})}, 13)[0];
  EXPECT_EQ(z.shape(), (Shape{2, 4}));
  EXPECT_EQ(z.item_as_double(0), 4.0);
  // Both axes reversed.
  const Tensor r = run_node(make_node("Slice", 5),
                            {x, ints({-1, -1}), ints({INT64_MIN, INT64_MIN}), ints({0, 1}), ints({-1, -2})}, 13)[0];
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_EQ(std::vector<float>(r.data<float>(), r.data<float>() + 6), (std::vector<float>{11, 9, 7, 5, 3, 1}));
  // Opset 1..9: attributes.
  Node old = make_node("Slice", 1, {{"starts", Attribute::of_ints({0, 1})}, {"ends", Attribute::of_ints({1, 1000})}});
  const Tensor o = run_node(old, {x}, 9)[0];
  EXPECT_EQ(o.shape(), (Shape{1, 3}));
  EXPECT_EQ(std::vector<float>(o.data<float>(), o.data<float>() + 3), (std::vector<float>{1, 2, 3}));
}

// An independent reference: the index list of one axis, walking from the spec's clamped start.
std::vector<int64_t> axis_indices(int64_t dim, int64_t start, int64_t end, int64_t step) {
  std::vector<int64_t> out;
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    for (int64_t i = std::max<int64_t>(start, 0); i < std::min(end, dim); i += step) out.push_back(i);
  } else if (dim > 0) {
    for (int64_t i = std::clamp<int64_t>(start, 0, dim - 1); i > std::max<int64_t>(end, -1); i += step)
      out.push_back(i);
  }
  return out;
}

TEST(Slice, RandomSlicesOfEveryElementSizeMatchAnIndexWalk) {
  std::mt19937 rng(1234);
  const Shape shape = {4, 5, 3, 6};
  for (DType dt : {DType::Float32, DType::Float16, DType::Int8, DType::Float64}) {
    const Tensor x = filled(dt, shape, 1);
    for (int trial = 0; trial < 60; ++trial) {
      std::vector<int64_t> starts, ends, axes, steps;
      std::vector<std::vector<int64_t>> idx(4);
      for (int64_t a = 0; a < 4; ++a) idx[a] = axis_indices(shape[a], 0, shape[a], 1);
      for (int64_t a = 0; a < 4; ++a) {
        if (rng() % 3 == 0) continue;
        const int64_t d = shape[a];
        int64_t st = static_cast<int64_t>(rng() % 4) + 1;
        if (rng() % 2) st = -st;
        const int64_t s = static_cast<int64_t>(rng() % (2 * d + 5)) - d - 2;
        const int64_t e = static_cast<int64_t>(rng() % (2 * d + 5)) - d - 2;
        starts.push_back(s);
        ends.push_back(e);
        axes.push_back(rng() % 2 ? a : a - 4);
        steps.push_back(st);
        idx[a] = axis_indices(d, s, e, st);
      }
      const Tensor y = run_node(make_node("Slice", 5), {x, ints(starts), ints(ends), ints(axes), ints(steps)}, 13)[0];
      const Shape want_shape = {static_cast<int64_t>(idx[0].size()), static_cast<int64_t>(idx[1].size()),
                                static_cast<int64_t>(idx[2].size()), static_cast<int64_t>(idx[3].size())};
      ASSERT_EQ(y.shape(), want_shape) << "trial " << trial;
      int64_t k = 0;
      for (int64_t i : idx[0])
        for (int64_t j : idx[1])
          for (int64_t l : idx[2])
            for (int64_t m : idx[3])
              ASSERT_EQ(y.item_as_double(k++), x.item_as_double(((i * 5 + j) * 3 + l) * 6 + m)) << "trial " << trial;
    }
  }
}

TEST(Slice, ReversesEveryDtype) {
  for (DType dt : kAllDTypes) {
    const Tensor x = filled(dt, {7});
    const Tensor y = run_node(make_node("Slice", 5), {x, ints({-1}), ints({INT64_MIN}), ints({0}), ints({-1})}, 13)[0];
    for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(y.item_as_double(i), x.item_as_double(6 - i)) << dtype_name(dt);
  }
}

TEST(Slice, BadParametersAreErrors) {
  const Tensor x = arange(10);
  expect_error<InvalidModel>(
      [&] {
        run_node(make_node("Slice", 5), {x, ints({0}), ints({5}), ints({0}), ints({0})}, 13);
      },
      "step for axis 0 is 0");
  EXPECT_THROW(run_node(make_node("Slice", 3), {x, ints({0, 1}), ints({5})}, 13), InvalidModel);
  EXPECT_THROW(run_node(make_node("Slice", 4), {x, ints({0}), ints({5}), ints({1})}, 13), ShapeError);
  const Tensor m = filled(DType::Float32, {3, 3});
  EXPECT_THROW(run_node(make_node("Slice", 4), {m, ints({0, 0}), ints({1, 1}), ints({1, -1})}, 13), InvalidModel);
}

std::vector<Tensor> split(const Tensor& x, size_t outputs, std::map<std::string, Attribute> attrs, int64_t opset,
                          const Tensor& sizes = Tensor()) {
  Node n = make_node("Split", sizes.defined() ? 2 : 1, std::move(attrs), outputs);
  std::vector<Tensor> in = {x};
  if (sizes.defined()) in.push_back(sizes);
  return run_node(n, in, opset);
}

TEST(Split, EqualPartsForEveryDtype) {
  for (DType dt : kAllDTypes) {
    const Tensor x = filled(dt, {2, 6});
    const auto parts = split(x, 3, {{"axis", Attribute::of_int(1)}}, 13);
    ASSERT_EQ(parts.size(), 3u);
    for (int64_t p = 0; p < 3; ++p) {
      ASSERT_EQ(parts[p].shape(), (Shape{2, 2}));
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 2; ++j)
          EXPECT_EQ(parts[p].item_as_double(i * 2 + j), x.item_as_double(i * 6 + p * 2 + j)) << dtype_name(dt);
    }
  }
}

TEST(Split, SizesFromInputAttributeAndNumOutputs) {
  const Tensor x = Tensor::from_vector<int32_t>({2, 6}, {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15});
  auto vals = [](const Tensor& t) { return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel()); };
  const auto a = split(x, 3, {{"axis", Attribute::of_int(-1)}}, 13, ints({1, 0, 5}));
  EXPECT_EQ(a[0].shape(), (Shape{2, 1}));
  EXPECT_EQ(a[1].shape(), (Shape{2, 0}));
  EXPECT_EQ(vals(a[0]), (std::vector<int32_t>{0, 10}));
  EXPECT_EQ(vals(a[2]), (std::vector<int32_t>{1, 2, 3, 4, 5, 11, 12, 13, 14, 15}));
  const auto b = split(x, 2, {{"split", Attribute::of_ints({1, 1})}}, 11);  // axis 0
  EXPECT_EQ(vals(b[1]), (std::vector<int32_t>{10, 11, 12, 13, 14, 15}));
  const Tensor y = filled(DType::Float32, {7});
  const auto c = split(y, 3, {{"num_outputs", Attribute::of_int(3)}}, 18);
  EXPECT_EQ(c[0].shape(), (Shape{3}));
  EXPECT_EQ(c[1].shape(), (Shape{3}));
  EXPECT_EQ(c[2].shape(), (Shape{1}));
  EXPECT_EQ(c[2].item_as_double(), y.item_as_double(6));
}

TEST(Split, SizesThatDoNotFitAreErrors) {
  const Tensor x = filled(DType::Float32, {7, 2});
  expect_error<ShapeError>([&] { run_node(make_node("Split", 1, {}, 2), {x}, 13); },
                           "axis 0 of shape [7, 2] (size 7) cannot be split evenly into 2 outputs");
  EXPECT_THROW(split(x, 2, {}, 13, ints({3, 3})), ShapeError);
  EXPECT_THROW(split(x, 2, {}, 13, ints({8, -1})), InvalidModel);
  EXPECT_THROW(split(x, 3, {}, 13, ints({3, 4})), ShapeError);  // 2 sizes for 3 outputs
}

}  // namespace
}  // namespace kiln

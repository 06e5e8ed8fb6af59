// MaxRoiPool's windows (whole-pixel regions, fractional bins, regions past the border, empty and
// malformed ones, spatial_scale) and errors; Multinomial's seeded draws, their distribution and
// errors. ONNX has no node cases for either: MaxRoiPool is checked against torchvision.ops.roi_pool
// and ONNX Runtime in tests/python/test_roi_pool.py, its gradient by finite differences in
// tests/autodiff/max_roi_pool_rules_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>

#include "kernels/kernel_test_util.h"
#include "kiln/session.h"
#include "runtime/graph_builders.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

Node roi_pool(std::vector<int64_t> pooled, float scale = 1.0f) {
  return make_node(
      "MaxRoiPool", 2,
      {{"pooled_shape", Attribute::of_ints(std::move(pooled))}, {"spatial_scale", Attribute::of_float(scale)}});
}

Tensor arange(Shape shape) {
  Tensor t = Tensor::zeros(DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

TEST(MaxRoiPool, Windows) {
  const Tensor x = arange({2, 1, 4, 4});  // batch 1 holds 16..31
  // Region (x1, y1, x2, y2) = (0, 0, 3, 3) is 4 x 4 pixels: 2 x 2 bins of 2 x 2. Region (1, 1, 1, 1)
  // is one pixel, every bin's window. A region past the border is clamped (its bins beyond
  // it are empty: 0), as is one wholly outside. A malformed region (x2 < x1) is one pixel. Batch index 1.0 picks
  // image 1.
  const Tensor rois = Tensor::from_vector<float>({5, 5}, {0, 0,  0,  3,  3,   //
                                                          0, 1,  1,  1,  1,   //
                                                          1, 2,  2,  9,  9,   //
                                                          0, 10, 10, 12, 12,  //
                                                          1, 3,  0,  1,  0});
  EXPECT_EQ(as_doubles(run1(roi_pool({2, 2}), {x, rois})),
            (std::vector<double>{5,  7,  13, 15,     //
                                 5,  5,  5,  5,      //
                                 31, 0,  0,  0,      // 8 x 8 from (2, 2): bins of 4, all but one past the border
                                 0,  0,  0,  0,      //
                                 19, 19, 19, 19}));  // (3, 0): one pixel
  // spatial_scale 0.5 halves the corners before rounding (half away from zero): (1, 1, 3, 3) ->
  // (1, 1, 2, 2), 2 x 2 pixels in one bin. Bins of 4 / 3 pixels overlap.
  EXPECT_EQ(as_doubles(run1(roi_pool({1, 1}, 0.5f), {x, Tensor::from_vector<float>({1, 5}, {0, 1, 1, 3, 3})})),
            (std::vector<double>{10}));
  EXPECT_EQ(as_doubles(run1(roi_pool({3, 1}), {x, Tensor::from_vector<float>({1, 5}, {0, 0, 0, 0, 3})})),
            (std::vector<double>{4, 8, 12}));  // rows [0, 2), [1, 3), [2, 4) of column 0
}

TEST(MaxRoiPool, Errors) {
  const Tensor x = Tensor::zeros(DType::Float32, {1, 1, 4, 4});
  expect_error<InvalidModel>(
      [&] {
        run_node(roi_pool({2, 2}), {x, Tensor::from_vector<float>({1, 5}, {1, 0, 0, 1, 1})});
      },
      "MaxRoiPool: rois[0, 0] = 1 is not a batch index of X (batch size 1)");
  // Corners that are no pixel position: NaN, infinite, beyond 1e15 (1e20 as float32 prints so).
  const std::pair<float, const char*> corners[] = {{NAN, "nan"}, {INFINITY, "inf"}, {1e20f, "1.0000000200408773e+20"}};
  for (const auto& corner : corners) {
    const float v = corner.first;  // a copy: clang 14 cannot capture structured bindings
    expect_error<InvalidModel>(
        [&] {
          run_node(roi_pool({2, 2}), {x, Tensor::from_vector<float>({1, 5}, {0, 0, 0, v, 1})});
        },
        std::string("rois[0] = (0, 0, ") + corner.second + ", 1) has a corner that is not a pixel position");
  }
  expect_error<ShapeError>(
      [&] {
        run_node(roi_pool({2, 2}), {x, Tensor::zeros(DType::Float32, {1, 4})});
      },
      "rois float[1, 4] [R, 5]");
  expect_error<TypeError>(
      [&] {
        run_node(roi_pool({2, 2}), {x, Tensor::zeros(DType::Float64, {1, 5})});
      },
      "rois (double) must have X's dtype (float)");
  expect_error<InvalidModel>(
      [&] {
        run_node(roi_pool({2}), {x, Tensor::zeros(DType::Float32, {1, 5})});
      },
      "pooled_shape [2] must be two positive ints");
  expect_error<InvalidModel>(
      [&] {
        run_node(make_node("MaxRoiPool", 2), {x, Tensor::zeros(DType::Float32, {1, 5})});
      },
      "attribute 'pooled_shape' is required");
}

Node multinomial(int64_t samples, std::optional<int64_t> dtype = std::nullopt) {
  std::map<std::string, Attribute> a{{"sample_size", Attribute::of_int(samples)}, {"seed", Attribute::of_float(3.0f)}};
  if (dtype) a["dtype"] = Attribute::of_int(*dtype);
  return make_node("Multinomial", 1, a);
}

// Draws follow softmax of each row: 40000 draws per row put each class within 5 standard deviations
// of its expected count (a fixed seed: the test is deterministic); a -inf class is never drawn.
TEST(Multinomial, DrawsFollowTheSoftmax) {
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), -INFINITY,  // p = 1/6, 2/6, 3/6, 0
                                     5.0f, 5.0f,           5.0f,           5.0f};
  const int64_t n = 40000;
  const Tensor y = run1(multinomial(n), {Tensor::from_vector<float>({2, 4}, logits)});
  ASSERT_EQ(y.dtype(), DType::Int32);
  ASSERT_EQ(y.shape(), (Shape{2, n}));
  const std::vector<double> p[2] = {{1.0 / 6, 2.0 / 6, 3.0 / 6, 0}, {0.25, 0.25, 0.25, 0.25}};
  for (int64_t r = 0; r < 2; ++r) {
    std::vector<int64_t> counts(4, 0);
    for (int64_t s = 0; s < n; ++s) {
      const int32_t k = y.data<int32_t>()[r * n + s];
      ASSERT_TRUE(k >= 0 && k < 4) << k;
      ++counts[size_t(k)];
    }
    for (size_t c = 0; c < 4; ++c) {
      const double expect = double(n) * p[r][c], sd = std::sqrt(double(n) * p[r][c] * (1 - p[r][c]));
      EXPECT_LE(std::abs(double(counts[c]) - expect), 5 * sd + 1e-9) << "row " << r << " class " << c;
    }
  }
}

// The seed attribute fixes a node's sequence: two Sessions give the same draws, successive runs of
// one Session differ; int64 output with dtype 7.
TEST(Multinomial, SeededRunsAndDtype) {
  using namespace kiln::test;
  const Model m = model({node("Multinomial", {"x"}, {"y"},
                              {{"sample_size", Attribute::of_int(64)},
                               {"seed", Attribute::of_float(7.0f)},
                               {"dtype", Attribute::of_int(7)}})},
                        {info("x", DType::Float64, {1, 5})}, {info("y", DType::Int64, {1, 64})});
  const Tensor x = Tensor::from_vector<double>({1, 5}, {0.1, 0.2, 0.3, 0.4, 0.5});
  Session a(m), b(m);
  const Tensor a1 = a.run({{"x", x}}).at("y").clone(), a2 = a.run({{"x", x}}).at("y").clone();
  const Tensor b1 = b.run({{"x", x}}).at("y");
  ASSERT_EQ(a1.dtype(), DType::Int64);
  EXPECT_EQ(as_doubles(a1), as_doubles(b1));
  EXPECT_NE(as_doubles(a1), as_doubles(a2));
}

TEST(Multinomial, Errors) {
  const Tensor x = Tensor::from_vector<float>({1, 3}, {0, 1, NAN});
  expect_error<InvalidModel>([&] { run_node(multinomial(2), {x}); },
                             "Multinomial: input[0, 2] = nan is not a log-probability");
  expect_error<InvalidModel>(
      [&] {
        run_node(multinomial(2), {Tensor::from_vector<float>({1, 2}, {-INFINITY, -INFINITY})});
      },
      "row 0 of 2 has no finite log-probability");
  expect_error<InvalidModel>(
      [&] {
        run_node(multinomial(0), {Tensor::zeros(DType::Float32, {1, 2})});
      },
      "sample_size 0 must be positive");
  expect_error<InvalidModel>(
      [&] {
        run_node(multinomial(1, 1), {Tensor::zeros(DType::Float32, {1, 2})});
      },
      "dtype 1 must be int32 (6) or int64 (7)");
  expect_error<ShapeError>([&] { run_node(multinomial(1), {Tensor::zeros(DType::Float32, {2})}); },
                           "input float[2] must be [batch_size, class_size]");
}

}  // namespace
}  // namespace kiln

// LpPool and GlobalLpPool against (sum |x|^p)^(1/p) over each window, evaluated in double, with
// strides, pads, auto_pad, dilations and opset 1's float p.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

Node pool_node(const std::string& op, std::map<std::string, Attribute> attrs) {
  Node n;
  n.name = "lp";
  n.op_type = op;
  n.inputs = {"x"};
  n.outputs = {"y"};
  n.attrs = std::move(attrs);
  return n;
}

// 2-D reference over [N, C, H, W] with explicit begin pads (after auto_pad, worked out by hand).
std::vector<double> ref_lp_pool_2d(const Tensor& x, const Shape& y_shape, std::vector<int64_t> k,
                                   std::vector<int64_t> s, std::vector<int64_t> d, std::vector<int64_t> pb, double p) {
  std::vector<double> y;
  const int64_t h = x.dim(2), w = x.dim(3);
  for (int64_t pl = 0; pl < y_shape[0] * y_shape[1]; ++pl)
    for (int64_t oh = 0; oh < y_shape[2]; ++oh)
      for (int64_t ow = 0; ow < y_shape[3]; ++ow) {
        double sum = 0;
        for (int64_t kh = 0; kh < k[0]; ++kh)
          for (int64_t kw = 0; kw < k[1]; ++kw) {
            const int64_t ih = oh * s[0] - pb[0] + kh * d[0], iw = ow * s[1] - pb[1] + kw * d[1];
            if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
            sum += std::pow(std::abs(x.item_as_double((pl * h + ih) * w + iw)), p);
          }
        y.push_back(std::pow(sum, 1.0 / p));
      }
  return y;
}

TEST(LpPool, MatchesReference) {
  struct Case {
    std::string name;
    std::map<std::string, Attribute> attrs;
    Shape y;
    std::vector<int64_t> k, s, d, pb;
    double p;
    int64_t opset = 17;
  };
  const std::vector<Case> cases = {
      {"p=2 default", {{"kernel_shape", Attribute::of_ints({2, 3})}}, {2, 3, 5, 4}, {2, 3}, {1, 1}, {1, 1}, {0, 0}, 2},
      {"p=3, strides, pads",
       {{"kernel_shape", Attribute::of_ints({3, 3})},
        {"p", Attribute::of_int(3)},
        {"strides", Attribute::of_ints({2, 2})},
        {"pads", Attribute::of_ints({1, 0, 1, 2})}},
       {2, 3, 3, 3},
       {3, 3},
       {2, 2},
       {1, 1},
       {1, 0},
       3},
      {"p=1 SAME_UPPER",
       {{"kernel_shape", Attribute::of_ints({2, 2})},
        {"p", Attribute::of_int(1)},
        {"strides", Attribute::of_ints({2, 2})},
        {"auto_pad", Attribute::of_string("SAME_UPPER")}},
       {2, 3, 3, 3},
       {2, 2},
       {2, 2},
       {1, 1},
       {0, 0},
       1},
      {"dilations (opset 18)",
       {{"kernel_shape", Attribute::of_ints({2, 2})}, {"dilations", Attribute::of_ints({2, 1})}},
       {2, 3, 4, 5},
       {2, 2},
       {1, 1},
       {2, 1},
       {0, 0},
       2,
       18},
      {"opset 1 float p",
       {{"kernel_shape", Attribute::of_ints({2, 2})}, {"p", Attribute::of_float(2.5f)}},
       {2, 3, 5, 5},
       {2, 2},
       {1, 1},
       {1, 1},
       {0, 0},
       2.5,
       1},
  };
  for (DType dt : {DType::Float32, DType::Float64})
    for (const Case& c : cases) {
      SCOPED_TRACE(fmt::format("{} {}", c.name, dtype_name(dt)));
      Tensor x = random_real(dt, {2, 3, 6, 6}, 4, -2.0, 2.0);
      const Tensor y = run_node(pool_node("LpPool", c.attrs), {x}, c.opset).at(0);
      ASSERT_EQ(y.shape(), c.y);
      const std::vector<double> ref = ref_lp_pool_2d(x, c.y, c.k, c.s, c.d, c.pb, c.p);
      double err = 0;
      for (int64_t i = 0; i < y.numel(); ++i) err = std::max(err, std::abs(y.item_as_double(i) - ref[size_t(i)]));
      EXPECT_LE(err, dt == DType::Float32 ? 1e-5 : 1e-12);  // |ref| <= 2 * 9
    }
}

TEST(GlobalLpPool, MatchesReferenceAnyRank) {
  for (const Shape& shape : {Shape{2, 3, 5}, Shape{2, 3, 4, 5}, Shape{1, 2, 2, 3, 2}})
    for (int64_t p : {1, 2, 3}) {
      SCOPED_TRACE(fmt::format("{} p={}", to_string(shape), p));
      Tensor x = random_real(DType::Float32, shape, 2, -2.0, 2.0);
      const Tensor y = run_node(pool_node("GlobalLpPool", {{"p", Attribute::of_int(p)}}), {x}).at(0);
      Shape want = shape;
      std::fill(want.begin() + 2, want.end(), 1);
      ASSERT_EQ(y.shape(), want);
      const int64_t plane = x.numel() / (shape[0] * shape[1]);
      for (int64_t pl = 0; pl < shape[0] * shape[1]; ++pl) {
        double sum = 0;
        for (int64_t i = 0; i < plane; ++i) sum += std::pow(std::abs(x.item_as_double(pl * plane + i)), double(p));
        EXPECT_NEAR(y.item_as_double(pl), std::pow(sum, 1.0 / double(p)), 1e-5) << pl;
      }
    }
}

TEST(LpPool, BadKernelIsNamed) {
  expect_error<ShapeError>(
      [&] {
        run_node(pool_node("LpPool", {{"kernel_shape", Attribute::of_ints({2})}}),
                 {random_real(DType::Float32, {1, 2, 4, 4}, 1, -2.0, 2.0)});
      },
      {"kernel_shape [2] has 1 dims but input float[1, 2, 4, 4] has 2 spatial dims", "node 'lp' (LpPool)"});
  EXPECT_THROW(run_node(pool_node("LpPool", {}), {random_real(DType::Float32, {1, 2, 4, 4}, 1, -2.0, 2.0)}),
               InvalidModel);
  EXPECT_THROW(run_node(pool_node("GlobalLpPool", {}), {random_real(DType::Float32, {1, 2}, 1, -2.0, 2.0)}),
               ShapeError);
}

}  // namespace
}  // namespace kiln

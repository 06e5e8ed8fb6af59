// LayerNormalization against the formula evaluated in double: every axis, Scale/B broadcast, the
// optional Mean and InvStdDev outputs, float32 (oneDNN) and float64 (plain loop).
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

Node ln_node(std::optional<int64_t> axis, bool bias, size_t outputs, float eps = 1e-5f) {
  Node n;
  n.name = "ln";
  n.op_type = "LayerNormalization";
  n.inputs = {"x", "scale"};
  if (bias) n.inputs.push_back("b");
  n.outputs = {"y", "mean", "inv_std"};
  n.outputs.resize(outputs);
  if (axis) n.attrs["axis"] = Attribute::of_int(*axis);
  n.attrs["epsilon"] = Attribute::of_float(eps);
  return n;
}

TEST(LayerNormalization, MatchesFormula) {
  struct Case {
    Shape x;
    std::optional<int64_t> axis;
    Shape scale;  // may be smaller than the normalised shape (broadcast)
    bool bias;
  };
  const std::vector<Case> cases = {
      {{4, 6}, std::nullopt, {6}, true}, {{2, 3, 5}, -1, {5}, false},     {{2, 3, 5}, 1, {3, 5}, true},
      {{2, 3, 5}, 1, {5}, true},         {{2, 3, 5}, 0, {2, 3, 5}, true}, {{3, 4, 2, 5}, -2, {1, 5}, true},
      {{8, 768}, -1, {768}, true},
  };
  uint32_t seed = 1;
  for (DType dt : {DType::Float32, DType::Float64})
    for (const Case& c : cases) {
      SCOPED_TRACE(fmt::format("{} {} axis {}", dtype_name(dt), to_string(c.x), c.axis ? *c.axis : -1));
      Tensor x = random_real(dt, c.x, seed++, -2.0, 2.0), s = random_real(dt, c.scale, seed++, -2.0, 2.0),
             b = random_real(dt, c.scale, seed++, -2.0, 2.0);
      std::vector<Tensor> in = {x, s};
      if (c.bias) in.push_back(b);
      const float eps = 1e-3f;
      const std::vector<Tensor> out = run_node(ln_node(c.axis, c.bias, 3, eps), in);
      const int64_t rank = int64_t(c.x.size()), axis = c.axis ? (*c.axis < 0 ? *c.axis + rank : *c.axis) : rank - 1;
      int64_t outer = 1;
      for (int64_t i = 0; i < axis; ++i) outer *= c.x[size_t(i)];
      const int64_t inner = x.numel() / outer, ps = s.numel();
      Shape stat = c.x;
      for (int64_t i = axis; i < rank; ++i) stat[size_t(i)] = 1;
      ASSERT_EQ(out.at(0).shape(), c.x);
      ASSERT_EQ(out.at(1).shape(), stat);
      ASSERT_EQ(out.at(2).dtype(), DType::Float32);
      double err = 0, serr = 0;
      for (int64_t r = 0; r < outer; ++r) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < inner; ++i) mean += x.item_as_double(r * inner + i);
        mean /= double(inner);
        for (int64_t i = 0; i < inner; ++i) var += std::pow(x.item_as_double(r * inner + i) - mean, 2);
        const double inv = 1.0 / std::sqrt(var / double(inner) + double(eps));
        for (int64_t i = 0; i < inner; ++i) {
          const double ref = (x.item_as_double(r * inner + i) - mean) * inv * s.item_as_double(i % ps) +
                             (c.bias ? b.item_as_double(i % ps) : 0.0);
          err = std::max(err, std::abs(out[0].item_as_double(r * inner + i) - ref));
        }
        serr =
            std::max(serr, std::abs(out[1].item_as_double(r) - mean) + std::abs(out[2].item_as_double(r) - inv) / inv);
      }
      // |y| stays below ~2 * 4 + 2 here; float32 rounding of mean, variance and products.
      EXPECT_LE(err, dt == DType::Float32 ? 1e-5 : 1e-12);
      EXPECT_LE(serr, 1e-6);  // Mean and InvStdDev are float32 (stash_type 1) for both dtypes
    }
}

TEST(LayerNormalization, OnlyYRequested) {
  Tensor x = random_real(DType::Float32, {3, 7}, 5, -2.0, 2.0), s = random_real(DType::Float32, {7}, 6, -2.0, 2.0);
  const Tensor y1 = run_node(ln_node(-1, false, 1), {x, s}).at(0);
  const Tensor y3 = run_node(ln_node(-1, false, 3), {x, s}).at(0);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(y1.item_as_double(i), y3.item_as_double(i)) << i;
}

TEST(LayerNormalization, BadScaleAndAxisAreNamed) {
  Tensor x = random_real(DType::Float32, {2, 3, 5}, 1, -2.0, 2.0);
  expect_error<ShapeError>(
      [&] {
        run_node(ln_node(1, false, 1), {x, random_real(DType::Float32, {4, 5}, 2, -2.0, 2.0)});
      },
      {"Scale float[4, 5] does not broadcast to the normalised shape [3, 5] (X "
       "float[2, 3, 5], axis 1)",
       "node 'ln' (LayerNormalization)"});
  EXPECT_THROW(run_node(ln_node(3, false, 1), {x, random_real(DType::Float32, {5}, 2, -2.0, 2.0)}), ShapeError);
  EXPECT_THROW(run_node(ln_node(-1, false, 1), {x, random_real(DType::Float64, {5}, 2, -2.0, 2.0)}), TypeError);
}

}  // namespace
}  // namespace kiln

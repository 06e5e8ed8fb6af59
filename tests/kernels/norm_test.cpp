// BatchNormalization (inference; float32, float64, opset 15's mixed parameter dtypes) and
// InstanceNormalization against their formulas evaluated in double on random inputs.
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

Node bn_node(std::map<std::string, Attribute> attrs = {}, std::vector<std::string> outputs = {"y"}) {
  Node n;
  n.name = "bn";
  n.op_type = "BatchNormalization";
  n.inputs = {"x", "scale", "b", "mean", "var"};
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  return n;
}

TEST(BatchNormalization, MatchesFormulaForEveryRank) {
  uint32_t seed = 1;
  for (const Shape& s : {Shape{4, 3}, Shape{2, 3, 7}, Shape{2, 5, 4, 6}, Shape{1, 4, 2, 3, 5}}) {
    SCOPED_TRACE(to_string(s));
    const int64_t c = s[1];
    Tensor x = random_f32(s, seed++, -3.f, 3.f), scale = random_f32({c}, seed++, -1.f, 1.f),
           b = random_f32({c}, seed++, -1.f, 1.f), mean = random_f32({c}, seed++, -1.f, 1.f),
           var = random_f32({c}, seed++, 0.1f, 2.f);
    const float eps = 1e-3f;
    Tensor y = run_node(bn_node({{"epsilon", Attribute::of_float(eps)}}), {x, scale, b, mean, var}, 15).at(0);
    ASSERT_EQ(y.shape(), s);
    const int64_t inner = x.numel() / (s[0] * c);
    double err = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t ch = (i / inner) % c;
      const double ref = scale.item_as_double(ch) * (x.item_as_double(i) - mean.item_as_double(ch)) /
                             std::sqrt(var.item_as_double(ch) + double(eps)) +
                         b.item_as_double(ch);
      err = std::max(err, std::abs(y.item_as_double(i) - ref));
    }
    EXPECT_LE(err, 1e-5);  // |ref| stays below ~15 here, so this is a relative 1e-6
  }
}

TEST(BatchNormalization, TrainingOutputsAndBadShapesAreNamed) {
  Tensor x = random_f32({2, 3, 4}, 1, -1.f, 1.f), p = random_f32({3}, 2, -1.f, 1.f);
  // Training mode itself is tested in batch_norm_training_test.cpp; here its outputs without it.
  expect_error<Unsupported>(
      [&] {
        run_node(bn_node({}, {"y", "running_mean", "running_var"}), {x, p, p, p, p}, 15);
      },
      "exists only in training mode");
  expect_error<ShapeError>(
      [&] {
        run_node(bn_node(), {x, p, random_f32({4}, 3, -1.f, 1.f), p, p}, 15);
      },
      {"B float[4] must be [3], one value per channel of X float[2, 3, 4]", "node 'bn' (BatchNormalization)"});
}

Tensor convert(const Tensor& t, DType dt) {
  Tensor out = Tensor::empty(dt, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DType::Float64) out.data<double>()[i] = t.item_as_double(i);
    else if (dt == DType::Float16) out.data<Half>()[i] = float_to_half(float(t.item_as_double(i)));
    else out.data<float>()[i] = float(t.item_as_double(i));
  }
  return out;
}

TEST(BatchNormalization, Float64AndMixedParameterDtypes) {
  const Shape s{2, 3, 4, 5};
  Tensor x = random_f32(s, 1, -3.f, 3.f), scale = random_f32({3}, 2, -1.f, 1.f), b = random_f32({3}, 3, -1.f, 1.f),
         mean = random_f32({3}, 4, -1.f, 1.f), var = random_f32({3}, 5, 0.1f, 2.f);
  struct Case {
    DType x, params, stats;
    int64_t opset;
  };
  for (const Case& c : {Case{DType::Float64, DType::Float64, DType::Float64, 9},
                        Case{DType::Float32, DType::Float32, DType::Float64, 14},
                        Case{DType::Float32, DType::Float64, DType::Float64, 15},
                        Case{DType::Float64, DType::Float32, DType::Float32, 15}}) {
    SCOPED_TRACE(fmt::format("X {} params {} stats {} opset {}", dtype_name(c.x), dtype_name(c.params),
                             dtype_name(c.stats), c.opset));
    // The parameters are float32 values, so converting them loses nothing.
    Tensor y = run_node(bn_node(),
                        {convert(x, c.x), convert(scale, c.params), convert(b, c.params), convert(mean, c.stats),
                         convert(var, c.stats)},
                        c.opset)
                   .at(0);
    ASSERT_EQ(y.dtype(), c.x);
    double err = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t ch = (i / 20) % 3;
      const double ref = scale.item_as_double(ch) * (x.item_as_double(i) - mean.item_as_double(ch)) /
                             std::sqrt(var.item_as_double(ch) + 1e-5) +
                         b.item_as_double(ch);
      err = std::max(err, std::abs(y.item_as_double(i) - ref));
    }
    EXPECT_LE(err, c.x == DType::Float64 ? 1e-6 : 1e-5);  // epsilon is a float attribute (1e-5f)
  }
  // Before opset 14 every input shares X's dtype.
  expect_error<TypeError>(
      [&] {
        run_node(bn_node(), {x, scale, b, convert(mean, DType::Float64), var}, 13);
      },
      "input_mean double[3] must have the dtype of X float[2, 3, 4, 5] (opset 13)");
}

Node in_node() {
  Node n;
  n.name = "in";
  n.op_type = "InstanceNormalization";
  n.inputs = {"x", "scale", "b"};
  n.outputs = {"y"};
  n.attrs["epsilon"] = Attribute::of_float(1e-3f);
  return n;
}

TEST(InstanceNormalization, MatchesFormula) {
  for (DType dt : {DType::Float32, DType::Float64})
    for (const Shape& s : {Shape{2, 3, 7}, Shape{2, 4, 3, 5}, Shape{1, 2, 2, 3, 4}}) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dt), to_string(s)));
      Tensor x = convert(random_f32(s, 7, -3.f, 3.f), dt), scale = convert(random_f32({s[1]}, 8, -1.f, 1.f), dt),
             b = convert(random_f32({s[1]}, 9, -1.f, 1.f), dt);
      const Tensor y = run_node(in_node(), {x, scale, b}).at(0);
      const int64_t plane = x.numel() / (s[0] * s[1]);
      double err = 0;
      for (int64_t p = 0; p < s[0] * s[1]; ++p) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < plane; ++i) mean += x.item_as_double(p * plane + i) / double(plane);
        for (int64_t i = 0; i < plane; ++i) var += std::pow(x.item_as_double(p * plane + i) - mean, 2) / double(plane);
        for (int64_t i = 0; i < plane; ++i) {
          const double ref = scale.item_as_double(p % s[1]) * (x.item_as_double(p * plane + i) - mean) /
                                 std::sqrt(var + double(1e-3f)) +
                             b.item_as_double(p % s[1]);
          err = std::max(err, std::abs(y.item_as_double(p * plane + i) - ref));
        }
      }
      EXPECT_LE(err, dt == DType::Float32 ? 1e-5 : 1e-12);
    }
  expect_error<ShapeError>(
      [&] {
        run_node(in_node(),
                 {random_f32({2, 3, 4}, 1, -1.f, 1.f), random_f32({4}, 2, -1.f, 1.f), random_f32({3}, 3, -1.f, 1.f)});
      },
      "scale float[4] must be float[3], one value per channel of input float[2, 3, 4]");
}

}  // namespace
}  // namespace kiln

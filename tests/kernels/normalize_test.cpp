// MeanVarianceNormalization, LpNormalization and LRN against their definitions evaluated in double
// (LRN with odd and even sizes, to pin oneDNN's window and alpha/size convention to ONNX's).
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

Node node(const std::string& op, std::map<std::string, Attribute> attrs) {
  Node n;
  n.name = "n";
  n.op_type = op;
  n.inputs = {"x"};
  n.outputs = {"y"};
  n.attrs = std::move(attrs);
  return n;
}

double max_err(const Tensor& y, const std::vector<double>& ref) {
  double err = 0;
  for (int64_t i = 0; i < y.numel(); ++i) err = std::max(err, std::abs(y.item_as_double(i) - ref[size_t(i)]));
  return err;
}

TEST(MeanVarianceNormalization, MatchesFormulaOverAxes) {
  const Shape shape{3, 4, 2, 5};
  for (DType dt : {DType::Float32, DType::Float64})
    for (const std::vector<int64_t>& axes : {std::vector<int64_t>{}, {0, 2, 3}, {1}, {-1, 0}, {0, 1, 2, 3}}) {
      SCOPED_TRACE(fmt::format("{} axes [{}]", dtype_name(dt), fmt::join(axes, ", ")));
      Tensor x = random_real(dt, shape, 3, -2.0, 2.0);
      std::map<std::string, Attribute> attrs;
      if (!axes.empty()) attrs["axes"] = Attribute::of_ints(axes);
      const Tensor y = run_node(node("MeanVarianceNormalization", attrs), {x}).at(0);
      std::vector<bool> red(4, axes.empty());
      if (axes.empty()) red[1] = false;  // default [0, 2, 3]
      for (int64_t a : axes) red[size_t(a < 0 ? a + 4 : a)] = true;
      // Group each element by its kept coordinates, then apply (x - mean) / (std + 1e-9).
      auto key = [&](int64_t i) {
        int64_t k = 0, rem = i;
        std::vector<int64_t> idx(4);
        for (size_t d = 4; d-- > 0;) idx[d] = rem % shape[d], rem /= shape[d];
        for (size_t d = 0; d < 4; ++d) k = k * shape[d] + (red[d] ? 0 : idx[d]);
        return k;
      };
      std::map<int64_t, std::pair<double, double>> st;  // key -> (sum, count)
      for (int64_t i = 0; i < x.numel(); ++i) st[key(i)].first += x.item_as_double(i), st[key(i)].second += 1;
      std::map<int64_t, double> var;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const auto& [s, n] = st[key(i)];
        var[key(i)] += std::pow(x.item_as_double(i) - s / n, 2) / n;
      }
      std::vector<double> ref;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const auto& [s, n] = st[key(i)];
        ref.push_back((x.item_as_double(i) - s / n) / (std::sqrt(var[key(i)]) + 1e-9));
      }
      EXPECT_LE(max_err(y, ref), dt == DType::Float32 ? 1e-5 : 1e-12);  // |ref| <= ~4
    }
  expect_error<ShapeError>(
      [&] {
        run_node(node("MeanVarianceNormalization", {{"axes", Attribute::of_ints({0, 4})}}),
                 {random_real(DType::Float32, shape, 1, -2.0, 2.0)});
      },
      "axes [0, 4] must be distinct and in range for input float[3, 4, 2, 5]");
}

TEST(LpNormalization, L1AndL2AlongAxis) {
  const Shape shape{3, 4, 5};
  for (DType dt : {DType::Float32, DType::Float64})
    for (int64_t p : {1, 2})
      for (int64_t axis : {0, 1, -1}) {
        SCOPED_TRACE(fmt::format("{} p={} axis={}", dtype_name(dt), p, axis));
        Tensor x = random_real(dt, shape, 9, -2.0, 2.0);
        // A zero line normalises to zeros instead of NaN.
        for (int64_t j = 0; j < 5; ++j) {
          if (dt == DType::Float64) x.data<double>()[20 + j] = 0;  // x[1, 0, :]
          else x.data<float>()[20 + j] = 0;
        }
        const Tensor y =
            run_node(node("LpNormalization", {{"axis", Attribute::of_int(axis)}, {"p", Attribute::of_int(p)}}), {x})
                .at(0);
        const int64_t a = axis < 0 ? axis + 3 : axis;
        int64_t inner = 1, outer = 1;
        for (int64_t d = 0; d < 3; ++d) (d < a ? outer : d > a ? inner : outer) *= (d == a ? 1 : shape[size_t(d)]);
        const int64_t len = shape[size_t(a)];
        std::vector<double> ref(size_t(x.numel()));
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            double norm = 0;
            for (int64_t j = 0; j < len; ++j) {
              const double v = x.item_as_double((o * len + j) * inner + i);
              norm += p == 1 ? std::abs(v) : v * v;
            }
            if (p == 2) norm = std::sqrt(norm);
            for (int64_t j = 0; j < len; ++j)
              ref[size_t((o * len + j) * inner + i)] =
                  norm == 0 ? 0 : x.item_as_double((o * len + j) * inner + i) / norm;
          }
        EXPECT_LE(max_err(y, ref), dt == DType::Float32 ? 1e-6 : 1e-14);  // |ref| <= 1
      }
  EXPECT_THROW(run_node(node("LpNormalization", {{"p", Attribute::of_int(3)}}),
                        {random_real(DType::Float32, shape, 1, -2.0, 2.0)}),
               InvalidModel);
}

TEST(LRN, MatchesOnnxFormulaForOddAndEvenSizes) {
  for (DType dt : {DType::Float32, DType::Float64})
    for (int64_t size : {1, 2, 3, 4, 5})
      for (const Shape& shape : {Shape{2, 7, 3, 4}, Shape{2, 6}, Shape{1, 5, 3, 2, 2}}) {
        SCOPED_TRACE(fmt::format("{} size {} {}", dtype_name(dt), size, to_string(shape)));
        Tensor x = random_real(dt, shape, uint32_t(size), -2.0, 2.0);
        const double alpha = 0.3, beta = 0.6, bias = 1.5;
        const Tensor y = run_node(node("LRN", {{"size", Attribute::of_int(size)},
                                               {"alpha", Attribute::of_float(float(alpha))},
                                               {"beta", Attribute::of_float(float(beta))},
                                               {"bias", Attribute::of_float(float(bias))}}),
                                  {x})
                             .at(0);
        const int64_t c = shape[1], rest = x.numel() / (shape[0] * c);
        const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;  // ONNX: floor((size-1)/2), ceil((size-1)/2)
        std::vector<double> ref;
        for (int64_t n = 0; n < shape[0]; ++n)
          for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t i = 0; i < rest; ++i) {
              double sq = 0;
              for (int64_t cc = std::max<int64_t>(0, ch - lo); cc <= std::min(c - 1, ch + hi); ++cc)
                sq += std::pow(x.item_as_double((n * c + cc) * rest + i), 2);
              ref.push_back(x.item_as_double((n * c + ch) * rest + i) /
                            std::pow(bias + double(float(alpha)) / double(size) * sq, double(float(beta))));
            }
        // The attributes are float32 in the model, so the reference uses their float values.
        EXPECT_LE(max_err(y, ref), dt == DType::Float32 ? 2e-6 : 1e-12);  // |ref| <= 2
      }
  EXPECT_THROW(run_node(node("LRN", {{"size", Attribute::of_int(0)}}),
                        {random_real(DType::Float32, {1, 3, 2, 2}, 1, -2.0, 2.0)}),
               InvalidModel);
  expect_error<ShapeError>(
      [&] {
        run_node(node("LRN", {{"size", Attribute::of_int(3)}}), {random_real(DType::Float32, {4}, 1, -2.0, 2.0)});
      },
      "LRN: input float[4] must be [N, C, ...]");
}

}  // namespace
}  // namespace kiln

// Softmax and LogSoftmax against the definition evaluated in double: opset 13's single axis and
// opsets 1-12's flatten-to-2-D semantics.
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

Node softmax_node(const std::string& op, std::optional<int64_t> axis) {
  Node n;
  n.name = "sm";
  n.op_type = op;
  n.inputs = {"x"};
  n.outputs = {"y"};
  if (axis) n.attrs["axis"] = Attribute::of_int(*axis);
  return n;
}

// (Log)softmax of x viewed as [outer, n, inner] along the middle dim.
std::vector<double> ref_softmax(const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log) {
  std::vector<double> y(size_t(x.numel()));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return (o * n + j) * inner + i; };
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, x.item_as_double(at(j)));
      for (int64_t j = 0; j < n; ++j) sum += std::exp(x.item_as_double(at(j)) - mx);
      for (int64_t j = 0; j < n; ++j) {
        const double v = x.item_as_double(at(j)) - mx;
        y[size_t(at(j))] = log ? v - std::log(sum) : std::exp(v) / sum;
      }
    }
  return y;
}

// max |y - ref| <= tol * max(1, max |ref|): probabilities are <= 1, log-probabilities reach ~-10.
void expect_close(const Tensor& y, const std::vector<double>& ref, double tol) {
  double err = 0, scale = 1;
  for (double v : ref) scale = std::max(scale, std::abs(v));
  for (int64_t i = 0; i < y.numel(); ++i) err = std::max(err, std::abs(y.item_as_double(i) - ref[size_t(i)]));
  EXPECT_LE(err, tol * scale) << "max abs err " << err << ", max |ref| " << scale;
}

TEST(Softmax, Opset13NormalisesOneAxis) {
  const Shape s{3, 4, 5};
  Tensor x = random_f32(s, 1, -4.f, 4.f);
  for (bool log : {false, true})
    for (int64_t axis : {0, 1, 2, -1, -3}) {
      SCOPED_TRACE(fmt::format("log={} axis={}", log, axis));
      const int64_t a = axis < 0 ? axis + 3 : axis;
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < a; ++d) outer *= s[size_t(d)];
      for (int64_t d = a + 1; d < 3; ++d) inner *= s[size_t(d)];
      Tensor y = run_node(softmax_node(log ? "LogSoftmax" : "Softmax", axis), {x}, 13).at(0);
      ASSERT_EQ(y.shape(), s);
      expect_close(y, ref_softmax(x, outer, s[size_t(a)], inner, log), 1e-6);
    }
  // The default axis is the last one.
  expect_close(run_node(softmax_node("Softmax", std::nullopt), {x}, 17).at(0), ref_softmax(x, 12, 5, 1, false), 1e-6);
}

TEST(Softmax, Opset11FlattensAtAxis) {
  const Shape s{2, 3, 4};
  Tensor x = random_f32(s, 2, -4.f, 4.f);
  for (bool log : {false, true}) {
    const std::string op = log ? "LogSoftmax" : "Softmax";
    // Default axis 1: rows of 3*4 elements.
    expect_close(run_node(softmax_node(op, std::nullopt), {x}, 11).at(0), ref_softmax(x, 2, 12, 1, log), 1e-6);
    expect_close(run_node(softmax_node(op, 0), {x}, 11).at(0), ref_softmax(x, 1, 24, 1, log), 1e-6);
    expect_close(run_node(softmax_node(op, -1), {x}, 11).at(0), ref_softmax(x, 6, 4, 1, log), 1e-6);
  }
}

TEST(Softmax, LargeInputsStayFinite) {
  Tensor x = Tensor::from_vector<float>({2, 3}, {1000.f, 1001.f, 1002.f, -1000.f, -1001.f, -1002.f});
  expect_close(run_node(softmax_node("Softmax", 1), {x}).at(0), ref_softmax(x, 2, 3, 1, false), 1e-6);
  expect_close(run_node(softmax_node("LogSoftmax", 1), {x}).at(0), ref_softmax(x, 2, 3, 1, true), 1e-6);
}

TEST(Softmax, AxisOutOfRangeIsNamed) {
  expect_error<ShapeError>(
      [&] {
        run_node(softmax_node("Softmax", 3), {random_f32({2, 3, 4}, 1, -4.f, 4.f)}, 13);
      },
      {"axis 3 is out of range for input float[2, 3, 4] (rank 3)", "node 'sm' (Softmax)"});
}

// Hardmax: 1 at the first maximum of each line of x viewed as [outer, n, inner], else 0.
std::vector<double> ref_hardmax(const Tensor& x, int64_t outer, int64_t n, int64_t inner) {
  std::vector<double> y(size_t(x.numel()), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      for (int64_t j = 1; j < n; ++j)
        if (x.item_as_double((o * n + j) * inner + i) > x.item_as_double((o * n + best) * inner + i)) best = j;
      y[size_t((o * n + best) * inner + i)] = 1.0;
    }
  return y;
}

TEST(Hardmax, OneHotOfFirstMaximumPerAxisAndFlattened) {
  Tensor x = random_f32({3, 4, 5}, 7, -4.f, 4.f);
  // Ties: the first maximum wins (numpy's argmax, ONNX's reference).
  for (int64_t j = 0; j < 5; ++j) x.data<float>()[4 * 5 + j] = x.data<float>()[2 * 5 + j] = 9.f;
  struct Case {
    int64_t opset;
    std::optional<int64_t> axis;
    int64_t outer, n, inner;
  };
  for (const Case& c :
       {Case{13, std::nullopt, 12, 5, 1}, Case{13, 1, 3, 4, 5}, Case{13, 0, 1, 3, 20}, Case{13, -2, 3, 4, 5},
        Case{11, std::nullopt, 3, 20, 1}, Case{11, 0, 1, 60, 1}, Case{11, 2, 12, 5, 1}, Case{11, 3, 60, 1, 1}}) {
    SCOPED_TRACE(fmt::format("opset {} axis {}", c.opset, c.axis ? *c.axis : 999));
    const std::vector<double> ref = ref_hardmax(x, c.outer, c.n, c.inner);
    Tensor y = run_node(softmax_node("Hardmax", c.axis), {x}, c.opset).at(0);
    ASSERT_EQ(y.shape(), x.shape());
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.item_as_double(i), ref[size_t(i)]) << "element " << i;
  }
  Tensor xd = Tensor::from_vector<double>({2, 3}, {1, 3, 2, -1, -5, -2});
  Tensor yd = run_node(softmax_node("Hardmax", std::nullopt), {xd}).at(0);
  EXPECT_EQ(yd.dtype(), DType::Float64);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(yd.item_as_double(i), (i == 1 || i == 3) ? 1.0 : 0.0) << i;
}

TEST(Hardmax, AxisOutOfRangeIsNamed) {
  expect_error<ShapeError>(
      [&] {
        run_node(softmax_node("Hardmax", 3), {random_f32({2, 3, 4}, 1, -4.f, 4.f)});
      },
      "axis 3 is out of range for input float[2, 3, 4] (rank 3)");
}

}  // namespace
}  // namespace kiln

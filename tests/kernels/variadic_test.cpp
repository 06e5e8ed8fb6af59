// Min, Max, Sum, Mean over one to four inputs broadcast together, against a per-element double
// reference; NaN propagation, integer dtypes, float16 accumulation and rejected inputs.
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

Tensor run_op(const std::string& op, const std::vector<Tensor>& in, int64_t opset = 13) {
  Node n;
  n.name = "v";
  n.op_type = op;
  for (size_t i = 0; i < in.size(); ++i) n.inputs.push_back("x" + std::to_string(i));
  n.outputs = {"Y"};
  return run_node(n, in, opset).at(0);
}

double fold(const std::string& op, const std::vector<double>& v) {
  double r = v[0];
  for (size_t i = 1; i < v.size(); ++i) {
    if (op == "Min") r = std::min(r, v[i]);
    else if (op == "Max") r = std::max(r, v[i]);
    else r += v[i];
  }
  return op == "Mean" ? r / static_cast<double>(v.size()) : r;
}

TEST(Variadic, OneToFourInputsUnderBroadcasting) {
  const std::vector<std::vector<Shape>> cases = {
      {{3, 4}},          {{3, 4}, {3, 4}},
      {{4}, {3, 1}, {}}, {{2, 1, 5}, {1, 3, 1}, {5}, {2, 3, 5}},
      {{0, 2}, {2}},     {{50, 1000}, {1000}, {50, 1}},
  };
  for (const std::string op : {"Min", "Max", "Sum", "Mean"})
    for (const auto& shapes : cases) {
      std::vector<Tensor> in;
      Shape out;
      for (size_t i = 0; i < shapes.size(); ++i) {
        in.push_back(random_f32(shapes[i], static_cast<uint32_t>(i + 1), -5.f, 5.f));
        out = i == 0 ? shapes[0] : broadcast_shapes(out, shapes[i]);
      }
      const Tensor y = run_op(op, in);
      ASSERT_EQ(y.shape(), out) << op;
      for (int64_t e = 0; e < y.numel(); ++e) {
        std::vector<double> v;
        for (size_t i = 0; i < in.size(); ++i) v.push_back(in[i].data<float>()[source_index(shapes[i], out, e)]);
        const double want = fold(op, v);
        ASSERT_NEAR(y.data<float>()[e], want, 1e-6 * std::fabs(want) + 1e-6)
            << op << " " << shapes.size() << " inputs at " << e;
      }
    }
}

TEST(Variadic, NaNPropagatesThroughMinAndMax) {
  const float nan = std::nanf("");
  const Tensor a = Tensor::from_vector<float>({3}, {nan, 1.f, 2.f});
  const Tensor b = Tensor::from_vector<float>({3}, {0.f, nan, 1.f});
  for (const std::string op : {"Min", "Max"}) {
    const Tensor y = run_op(op, {a, b});
    EXPECT_TRUE(std::isnan(y.data<float>()[0])) << op;
    EXPECT_TRUE(std::isnan(y.data<float>()[1])) << op;
    EXPECT_EQ(y.data<float>()[2], op == "Min" ? 1.f : 2.f);
  }
}

TEST(Variadic, IntegersAndFloat16) {
  const Tensor a = Tensor::from_vector<int64_t>({3}, {std::numeric_limits<int64_t>::min(), 5, -7});
  const Tensor b = Tensor::from_vector<int64_t>({1}, {0});
  EXPECT_EQ(run_op("Min", {a, b}).to_int64_vector(),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 0, -7}));
  EXPECT_EQ(run_op("Max", {a, b}).to_int64_vector(), (std::vector<int64_t>{0, 5, 0}));
  const Tensor u = Tensor::from_vector<uint8_t>({2}, {200, 3});
  EXPECT_EQ(run_op("Max", {u, Tensor::from_vector<uint8_t>({2}, {100, 4})}).to_int64_vector(),
            (std::vector<int64_t>{200, 4}));
  // Float16 sums accumulate in float: 2048 + 1 + 1 is 2050 (summing in half would stay at 2048).
  const auto h = [](float v) { return Tensor::from_vector<Half>({1}, {float_to_half(v)}); };
  EXPECT_EQ(run_op("Sum", {h(2048.f), h(1.f), h(1.f)}).item_as_double(), 2050.0);
  EXPECT_EQ(run_op("Mean", {h(1.f), h(2.f)}).item_as_double(), 1.5);
  // Min/Max took only floats before opset 12; Sum and Mean never take integers.
  EXPECT_THROW(run_op("Max", {a, b}, 11), Unsupported);
  EXPECT_THROW(run_op("Sum", {a, b}), Unsupported);
}

TEST(Variadic, RejectsMixedDtypesAndShapes) {
  expect_error<TypeError>(
      [&] {
        const Tensor f = Tensor::zeros(DType::Float32, {2});
        run_op("Sum", {f, f, Tensor::zeros(DType::Float64, {2})});
      },
      "input 'x2' is double but input 'x0' is float");
  expect_error<ShapeError>(
      [&] {
        run_op("Max", {Tensor::zeros(DType::Float32, {2, 3}), Tensor::zeros(DType::Float32, {3}),
                       Tensor::zeros(DType::Float32, {2})});
      },
      "'x0' [2, 3], 'x1' [3], 'x2' [2]");
  Node none;
  none.op_type = "Mean";
  none.outputs = {"Y"};
  EXPECT_THROW(run_node(none, {}, 13), InvalidModel);
}

}  // namespace
}  // namespace kiln

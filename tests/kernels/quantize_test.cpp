// Linear quantization kernels: rounding (half to even) and saturation, per-axis parameters,
// int32 dequantization, and the integer products and convolutions against references built here
// (exact: the float products of small integers are exact), with the errors for bad types and shapes.
// ONNX's node cases cover the documented examples (conformance).
#include <gtest/gtest.h>

#include <random>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

template <class T>
Tensor vec(Shape s, std::vector<T> v) {
  return Tensor::from_vector<T>(std::move(s), std::move(v));
}

template <class T>
Tensor random_q(Shape s, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<T> v(static_cast<size_t>(numel(s)));
  for (T& e : v) e = static_cast<T>(dist(rng));
  return Tensor::from_vector<T>(std::move(s), std::move(v));
}

// t - zero as float32 (zero per dim-0 slice when it has several values).
Tensor shifted(const Tensor& t, const std::vector<int>& zero) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  const int64_t per = t.numel() / t.dim(0);
  for (int64_t i = 0; i < t.numel(); ++i)
    v[size_t(i)] = float(t.item_as_double(i)) - float(zero.size() == 1 ? zero[0] : zero[size_t(i / per)]);
  return Tensor::from_vector<float>(t.shape(), v);
}

TEST(Quantize, RoundsHalfToEvenAndSaturates) {
  const Tensor x = vec<float>({6}, {0.5f, 1.5f, 2.5f, -0.5f, 300.0f, -300.0f});
  const Tensor y = run1(make_node("QuantizeLinear", 3), {x, Tensor::scalar<float>(1.0f), Tensor::scalar<int8_t>(0)});
  EXPECT_EQ(y.to_int64_vector(), (std::vector<int64_t>{0, 2, 2, 0, 127, -128}));
  const Tensor u = run1(make_node("QuantizeLinear", 2), {x, Tensor::scalar<float>(0.5f)});  // uint8, zero 0
  EXPECT_EQ(u.dtype(), DType::Uint8);
  EXPECT_EQ(u.to_int64_vector(), (std::vector<int64_t>{1, 3, 5, 0, 255, 0}));
}

TEST(Quantize, PerAxisParametersAndInt32Dequantize) {
  const Tensor x = vec<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Node q = make_node("QuantizeLinear", 3, {{"axis", Attribute::of_int(0)}});
  const Tensor y = run1(q, {x, vec<float>({2}, {1.0f, 2.0f}), vec<uint8_t>({2}, {10, 20})});
  EXPECT_EQ(y.to_int64_vector(), (std::vector<int64_t>{11, 12, 13, 22, 22, 23}));  // 2.5 -> 2, 1.5 -> 2
  const Node dq = make_node("DequantizeLinear", 3, {{"axis", Attribute::of_int(-2)}});
  EXPECT_EQ(as_doubles(run1(dq, {y, vec<float>({2}, {1.0f, 2.0f}), vec<uint8_t>({2}, {10, 20})})),
            (std::vector<double>{1, 2, 3, 4, 4, 6}));
  EXPECT_EQ(as_doubles(
                run1(make_node("DequantizeLinear", 2), {vec<int32_t>({2}, {-7, 100000}), Tensor::scalar<float>(0.5f)})),
            (std::vector<double>{-3.5, 50000}));
}

TEST(Quantize, MatMulIntegerWithZeroPointsAndBatchBroadcast) {
  const Tensor a = random_q<uint8_t>({2, 1, 3, 5}, 1, 0, 255), b = random_q<int8_t>({4, 5, 2}, 2, -128, 127);
  const Tensor az = vec<uint8_t>({3}, {3, 130, 255}), bz = vec<int8_t>({2}, {-5, 7});
  const Tensor got = run1(make_node("MatMulInteger", 4), {a, b, az, bz});
  ASSERT_EQ(got.shape(), (Shape{2, 4, 3, 2}));
  for (int64_t i = 0; i < got.numel(); ++i) {
    const int64_t n = i % 2, m = (i / 2) % 3, bb = (i / 6) % 4, ba = i / 24;
    int64_t want = 0;
    for (int64_t k = 0; k < 5; ++k)
      want += (a.item_as_double((ba * 3 + m) * 5 + k) - az.item_as_double(m)) *
              (b.item_as_double((bb * 5 + k) * 2 + n) - bz.item_as_double(n));
    ASSERT_EQ(got.to_int64_vector()[size_t(i)], want) << "element " << i;
  }
}

TEST(Quantize, ConvIntegerMatchesFloatConvOfShiftedValues) {
  const std::map<std::string, Attribute> attrs = {{"group", Attribute::of_int(2)},
                                                  {"strides", Attribute::of_ints({2, 1})},
                                                  {"dilations", Attribute::of_ints({1, 2})},
                                                  {"pads", Attribute::of_ints({1, 0, 1, 2})}};
  const Tensor x = random_q<uint8_t>({2, 4, 7, 6}, 3, 0, 255), w = random_q<int8_t>({6, 2, 3, 2}, 4, -128, 127);
  const std::vector<int> wz = {1, -2, 3, 0, 5, -6};
  std::vector<int8_t> wz8(wz.begin(), wz.end());
  const Tensor got =
      run1(make_node("ConvInteger", 4, attrs), {x, w, Tensor::scalar<uint8_t>(9), vec<int8_t>({6}, wz8)});
  const Tensor want = run1(make_node("Conv", 2, attrs), {shifted(x, {9}), shifted(w, wz)});
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(as_doubles(got), as_doubles(want));

  // QLinearConv = requantized (ConvInteger + B) with x_scale * w_scale[m] / y_scale.
  const std::vector<float> ws = {0.01f, 0.02f, 0.005f, 0.01f, 0.03f, 0.002f};
  const Tensor bias = vec<int32_t>({6}, {100, -200, 0, 5, -7, 3000});
  const Tensor q = run1(make_node("QLinearConv", 9, attrs),
                        {x, Tensor::scalar<float>(0.5f), Tensor::scalar<uint8_t>(9), w, vec<float>({6}, ws),
                         vec<int8_t>({6}, wz8), Tensor::scalar<float>(4.0f), Tensor::scalar<uint8_t>(128), bias});
  const int64_t plane = got.numel() / (2 * 6);
  for (int64_t i = 0; i < got.numel(); ++i) {
    const int64_t m = (i / plane) % 6;
    const float v =
        std::nearbyint(float(got.item_as_double(i) + bias.item_as_double(m)) * (0.5f * ws[size_t(m)] / 4.0f)) + 128;
    ASSERT_EQ(q.item_as_double(i), std::clamp(v, 0.0f, 255.0f)) << "element " << i;
  }
}

TEST(Quantize, ErrorsNameTheInput) {
  const Tensor x = vec<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_error<TypeError>(
      [&] {
        run_node(make_node("QuantizeLinear", 3), {x, Tensor::scalar<float>(1.0f), Tensor::scalar<int16_t>(0)});
      },
      "y_zero_point is int16");
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("QuantizeLinear", 2), {x, vec<float>({2}, {1.0f, 2.0f})});
      },
      "y_scale float[2] must be a scalar or 1-D with one value per slice of axis 1 of data [2, 3]");
  expect_error<InvalidModel>(
      [&] {
        run_node(make_node("DequantizeLinear", 2, {{"axis", Attribute::of_int(2)}}),
                 {vec<uint8_t>({2, 3}, {1, 2, 3, 4, 5, 6}), vec<float>({3}, {1, 2, 3})});
      },
      "axis 2 is outside the rank 2");
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("MatMulInteger", 2),
                 {random_q<uint8_t>({2, 3}, 1, 0, 9), random_q<uint8_t>({2, 3}, 2, 0, 9)});
      },
      "MatMulInteger: cannot multiply uint8[2, 3] by uint8[2, 3] (inner dims 3 vs 2)");
  expect_error<TypeError>(
      [&] {
        run_node(make_node("MatMulInteger", 2), {x, random_q<uint8_t>({3, 2}, 2, 0, 9)});
      },
      "A float[2, 3]");
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("ConvInteger", 2, {{"group", Attribute::of_int(3)}}),
                 {random_q<uint8_t>({1, 4, 5, 5}, 1, 0, 9), random_q<uint8_t>({2, 2, 3, 3}, 2, 0, 9)});
      },
      "do not fit group = 3");
}

}  // namespace
}  // namespace kiln

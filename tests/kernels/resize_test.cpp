// Resize through run_node against outputs of ONNX's reference implementation
// (onnx/backend/test/case/node/resize.py: interpolate_nd), for cases the conformance suite lacks:
// trilinear, cubic with pytorch_half_pixel / asymmetric + exclude_outside, nearest crop-and-resize,
// align_corners with sizes. Tolerance: 1e-5 relative + 1e-6 absolute (the reference is float64
// rounded to float32; Kiln interpolates in double).
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;

Node resize_node(std::map<std::string, Attribute> attrs, std::vector<std::string> inputs = {"X", "", "scales"}) {
  Node n;
  n.name = "r";
  n.op_type = "Resize";
  n.inputs = std::move(inputs);
  n.outputs = {"Y"};
  n.attrs = std::move(attrs);
  return n;
}

Attribute str(const char* s) { return Attribute::of_string(s); }

Tensor scales(std::vector<float> v) { return Tensor::from_vector<float>({static_cast<int64_t>(v.size())}, v); }
Tensor sizes(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v); }

void expect_close(const Tensor& y, const Shape& shape, const std::vector<double>& want) {
  ASSERT_EQ(y.shape(), shape);
  ASSERT_EQ(y.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(y.item_as_double(static_cast<int64_t>(i)), want[i], 1e-6 + 1e-5 * std::fabs(want[i]))
        << "element " << i;
}

TEST(Resize, TrilinearHalfPixelMatchesReference) {
  std::vector<float> xs(8);
  for (int i = 0; i < 8; ++i) xs[i] = static_cast<float>(i) * 1.5f - 2.f;
  xs[5] = 7.f;  // [0, 0, 1, 0, 1]
  const Tensor x = Tensor::from_vector<float>({1, 1, 2, 2, 2}, xs);
  const Tensor y = run_node(resize_node({{"mode", str("linear")}}), {x, Tensor(), scales({1, 1, 2, 1.5f, 2})}, 13)[0];
  expect_close(y, {1, 1, 4, 3, 4},
               {-2,   -1.625,   -0.875,  -0.5,  -0.5, -0.125,   0.625,    1,      1,   1.375, 2.125, 2.5,
                -0.5, -0.03125, 0.90625, 1.375, 1,    1.421875, 2.265625, 2.6875, 2.5, 2.875, 3.625, 4,
                2.5,  3.15625,  4.46875, 5.125, 4,    4.515625, 5.546875, 6.0625, 5.5, 5.875, 6.625, 7,
                4,    4.75,     6.25,    7,     5.5,  6.0625,   7.1875,   7.75,   7,   7.375, 8.125, 8.5});
}

Tensor squares_4x4() {
  std::vector<float> v;
  for (int i = 1; i <= 16; ++i) v.push_back(static_cast<float>(i * i) / 4.f);
  return Tensor::from_vector<float>({1, 1, 4, 4}, v);
}

TEST(Resize, CubicPytorchHalfPixelWithSizesMatchesReference) {
  const Node n = resize_node({{"mode", str("cubic")}, {"coordinate_transformation_mode", str("pytorch_half_pixel")}},
                             {"X", "", "", "sizes"});
  const Tensor y = run_node(n, {squares_4x4(), Tensor(), Tensor(), sizes({1, 1, 3, 2})}, 13)[0];
  expect_close(y, {1, 1, 3, 2}, {1.2283709, 4.51468468, 13.2265625, 22.5234375, 41.9284592, 57.2358932});
}

const std::vector<float> k3x3 = {0, 3, 1, 4, -2, 6, 5, 8, 2};

TEST(Resize, CubicAsymmetricExcludeOutsideMatchesReference) {
  const Node n = resize_node({{"mode", str("cubic")},
                              {"coordinate_transformation_mode", str("asymmetric")},
                              {"cubic_coeff_a", Attribute::of_float(-0.5f)},
                              {"exclude_outside", Attribute::of_int(1)}});
  const Tensor x = Tensor::from_vector<float>({1, 1, 3, 3}, k3x3);
  const Tensor y = run_node(n, {x, Tensor(), scales({1, 1, 1.5f, 2.5f})}, 13)[0];
  expect_close(y, {1, 1, 4, 7},
               {0,          1.14179099, 2.6299212,    2.85826778,   1.83582091, 1,          0.769230783,
                2.64285707, 1.06849682, -0.851518571, -0.386670411, 2.48134327, 4.67857122, 5.34615374,
                4.60714293, 3.10314488, 1.2117548,    1.31777275,   3.42537308, 5.07142878, 5.55769253,
                5,          6.32089567, 7.88188982,   7.1968503,    4.23880577, 2,          1.30769229});
}

TEST(Resize, LinearAlignCornersWithSizesMatchesReferenceInEveryFloatType) {
  const Node n = resize_node({{"mode", str("linear")}, {"coordinate_transformation_mode", str("align_corners")}},
                             {"X", "", "", "sizes"});
  const std::vector<double> want = {
      0, 1.5,        3, 2,   1, 2.66666675, 1.16666663, -0.333333343, 2, 4.33333349, 4.33333349, 2.83333325, 1.33333337,
      3, 4.66666651, 5, 6.5, 8, 5,          2};
  const Tensor x = Tensor::from_vector<float>({1, 1, 3, 3}, k3x3);
  expect_close(run_node(n, {x, Tensor(), Tensor(), sizes({1, 1, 4, 5})}, 13)[0], {1, 1, 4, 5}, want);
  std::vector<double> xd(k3x3.begin(), k3x3.end());
  const Tensor y64 =
      run_node(n, {Tensor::from_vector<double>({1, 1, 3, 3}, xd), Tensor(), Tensor(), sizes({1, 1, 4, 5})}, 13)[0];
  EXPECT_EQ(y64.dtype(), DType::Float64);
  expect_close(y64, {1, 1, 4, 5}, want);
  // float16 holds these inputs exactly; the outputs round to 11 bits (relative error <= 2^-11).
  Tensor xh = Tensor::empty(DType::Float16, {1, 1, 3, 3});
  for (int i = 0; i < 9; ++i) xh.data<Half>()[i] = float_to_half(k3x3[i]);
  const Tensor yh = run_node(n, {xh, Tensor(), Tensor(), sizes({1, 1, 4, 5})}, 13)[0];
  ASSERT_EQ(yh.dtype(), DType::Float16);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(yh.item_as_double(static_cast<int64_t>(i)), want[i], 5e-4 * std::fabs(want[i]) + 1e-6) << i;
}

TEST(Resize, NearestCropAndResizeExtrapolatesOutsideTheRoi) {
  const Node n = resize_node({{"mode", str("nearest")},
                              {"nearest_mode", str("round_prefer_ceil")},
                              {"coordinate_transformation_mode", str("tf_crop_and_resize")},
                              {"extrapolation_value", Attribute::of_float(-1.f)}},
                             {"X", "roi", "", "sizes"});
  std::vector<float> v;
  for (int i = 1; i <= 16; ++i) v.push_back(static_cast<float>(i));
  const Tensor roi = Tensor::from_vector<float>({8}, {0, 0, 0.2f, 0.6f, 1, 1, 1.3f, 0.9f});
  const Tensor y =
      run_node(n, {Tensor::from_vector<float>({1, 1, 4, 4}, v), roi, Tensor(), sizes({1, 1, 3, 4})}, 13)[0];
  expect_close(y, {1, 1, 3, 4}, {7, 7, 7, 8, 11, 11, 11, 12, -1, -1, -1, -1});
}

TEST(Resize, NearestMovesInt64ExactlyWithTfHalfPixelForNn) {
  // x_original = (x + 0.5) / 2 = 0.25, 0.75, ..., 3.75 -> round_prefer_floor 0,1,1,2,2,3,3,(4->3).
  const int64_t big = (int64_t{1} << 60) + 1;  // not representable in double
  const Tensor x = Tensor::from_vector<int64_t>({1, 4}, {big, big + 1, big + 2, big + 3});
  const Node n = resize_node({{"coordinate_transformation_mode", str("tf_half_pixel_for_nn")}});
  const Tensor y = run_node(n, {x, Tensor::from_vector<float>({0}, {}), scales({1, 2})}, 11)[0];
  ASSERT_EQ(y.shape(), (Shape{1, 8}));
  const std::vector<int64_t> idx = {0, 1, 1, 2, 2, 3, 3, 3};
  for (size_t i = 0; i < idx.size(); ++i) EXPECT_EQ(y.data<int64_t>()[i], big + idx[i]) << i;
}

TEST(Resize, NearestFloorAndCeilModesByHand) {
  // asymmetric, scale 1.5 over 4 -> 6: x_original = 0, 0.667, 1.333, 2, 2.667, 3.333.
  const Tensor x = Tensor::from_vector<float>({4}, {10, 20, 30, 40});
  auto run = [&](const char* mode) {
    const Node n = resize_node({{"coordinate_transformation_mode", str("asymmetric")}, {"nearest_mode", str(mode)}});
    return run_node(n, {x, Tensor(), scales({1.5f})}, 13)[0];
  };
  expect_close(run("floor"), {6}, {10, 10, 20, 30, 30, 40});
  expect_close(run("ceil"), {6}, {10, 20, 30, 30, 40, 40});
  expect_close(run("round_prefer_floor"), {6}, {10, 20, 20, 30, 40, 40});
}

TEST(Resize, RejectsBadInputsWithClearMessages) {
  const Tensor x = Tensor::zeros(DType::Float32, {1, 1, 2, 2});
  expect_error<InvalidModel>(
      [&] {
        run_node(resize_node({}, {"X", "", "scales", "sizes"}),
                 {x, Tensor(), scales({1, 1, 2, 2}), sizes({1, 1, 4, 4})}, 13);
      },
      "exactly one of scales and sizes must be given (non-empty); got both");
  expect_error<ShapeError>(
      [&] {
        run_node(resize_node({}), {x, Tensor(), scales({1, 2})}, 13);
      },
      "must be float with one entry per dimension of input [1, 1, 2, 2]");
  expect_error<Unsupported>(
      [&] {
        run_node(resize_node({{"mode", str("linear")}}),
                 {Tensor::zeros(DType::Int32, {2, 2}), Tensor(), scales({2, 2})}, 13);
      },
      "linear interpolation of int32 input [2, 2] is not supported");
  expect_error<Unsupported>(
      [&] {
        run_node(resize_node({{"mode", str("area")}}), {x, Tensor(), scales({1, 1, 2, 2})}, 13);
      },
      "mode 'area' is not supported");
  EXPECT_THROW(run_node(resize_node({{"mode", str("area")}}), {x, Tensor(), scales({1, 1, 2, 2})}, 13), Unsupported);
}

}  // namespace
}  // namespace kiln

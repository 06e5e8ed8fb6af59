// Expand, Tile, Pad, DepthToSpace, SpaceToDepth through run_node, against hand-computed values,
// numpy outputs (np.pad) and index-formula references written from the ONNX spec.
#include <gtest/gtest.h>

#include <functional>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

TEST(Expand, BroadcastsBothWaysForEveryDtype) {
  for (DType dt : kAllDTypes) {
    const Tensor x = filled(dt, {3, 1}, 3);
    const Tensor y = run_node(make_node("Expand", 2), {x, ints({2, 1, 6})}, 13)[0];
    ASSERT_EQ(y.shape(), (Shape{2, 3, 6})) << dtype_name(dt);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 6; ++j)
          ASSERT_EQ(y.item_as_double((b * 3 + i) * 6 + j), x.item_as_double(i)) << dtype_name(dt);
  }
  // A target of lower rank and 1s keeps the input's dims.
  const Tensor x = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor y = run_node(make_node("Expand", 2), {x, ints({1, 1})}, 13)[0];
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(as_doubles(y), as_doubles(x));
  const Tensor row =
      run_node(make_node("Expand", 2), {Tensor::from_vector<float>({1, 3}, {7, 8, 9}), ints({2, 3})}, 13)[0];
  EXPECT_EQ(as_doubles(row), (std::vector<double>{7, 8, 9, 7, 8, 9}));
}

TEST(Expand, RejectsIncompatibleShapes) {
  expect_error<ShapeError>(
      [] {
        run_node(make_node("Expand", 2), {Tensor::zeros(DType::Float32, {3}), ints({2})}, 13);
      },
      "cannot expand input [3] to shape [2]: dimensions must be equal or 1");
}

TEST(Tile, RepeatsEveryAxisForEveryDtype) {
  for (DType dt : kAllDTypes) {
    const Tensor x = filled(dt, {2, 3}, 3);
    const Tensor y = run_node(make_node("Tile", 2), {x, ints({3, 2})}, 13)[0];
    ASSERT_EQ(y.shape(), (Shape{6, 6}));
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 6; ++j) ASSERT_EQ(y.item_as_double(i * 6 + j), x.item_as_double((i % 2) * 3 + j % 3));
  }
  const Tensor y = run_node(make_node("Tile", 2), {Tensor::from_vector<int32_t>({2}, {1, 2}), ints({0})}, 13)[0];
  EXPECT_EQ(y.shape(), (Shape{0}));
}

TEST(Tile, RejectsRepeatsOfTheWrongLength) {
  expect_error<ShapeError>(
      [] {
        run_node(make_node("Tile", 2), {Tensor::zeros(DType::Float32, {2, 2}), ints({2})}, 13);
      },
      "repeats [2] must have one entry per dimension of input [2, 2]");
}

Attribute mode(const char* m) { return Attribute::of_string(m); }

TEST(Pad, SpecExamplesForEachMode) {
  const Tensor x = Tensor::from_vector<float>({3, 2}, {1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f});
  const Tensor pads = ints({0, 2, 0, 0});
  auto run = [&](const char* m) {
    return as_doubles(run_node(make_node("Pad", 2, {{"mode", mode(m)}}), {x, pads}, 13)[0]);
  };
  const std::vector<double> reflect = {1.0, 1.2, 1.0, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7, 4.5, 5.7};
  const std::vector<double> edge = {1.0, 1.0, 1.0, 1.2, 2.3, 2.3, 2.3, 3.4, 4.5, 4.5, 4.5, 5.7};
  const std::vector<double> zero = {0, 0, 1.0, 1.2, 0, 0, 2.3, 3.4, 0, 0, 4.5, 5.7};
  for (auto [got, want] : {std::pair{run("reflect"), reflect}, {run("edge"), edge}, {run("constant"), zero}})
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
}

TEST(Pad, ReflectBeyondTheEdgeMatchesNumpy) {
  // np.pad(np.arange(3), (5, 4), 'reflect') and np.pad(np.arange(3), (5, 4), 'edge').
  const Tensor x = Tensor::from_vector<int64_t>({3}, {0, 1, 2});
  EXPECT_EQ(as_doubles(run_node(make_node("Pad", 2, {{"mode", mode("reflect")}}), {x, ints({5, 4})}, 13)[0]),
            (std::vector<double>{1, 0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2}));
  EXPECT_EQ(as_doubles(run_node(make_node("Pad", 2, {{"mode", mode("edge")}}), {x, ints({5, 4})}, 13)[0]),
            (std::vector<double>{0, 0, 0, 0, 0, 0, 1, 2, 2, 2, 2, 2}));
}

TEST(Pad, ConstantValueNegativePadsAndOldOpsetAttributes) {
  // pads [1, -1, 0, 2] on [2, 3]: a row of 9s above, first column cropped, two 9-columns right.
  const Tensor x = Tensor::from_vector<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor y = run_node(make_node("Pad", 3), {x, ints({1, -1, 0, 2}), Tensor::scalar<int32_t>(9)}, 13)[0];
  EXPECT_EQ(y.shape(), (Shape{3, 4}));
  EXPECT_EQ(as_doubles(y), (std::vector<double>{9, 9, 9, 9, 2, 3, 9, 9, 5, 6, 9, 9}));
  // Opset 2: pads and value are attributes.
  const Node old =
      make_node("Pad", 1, {{"pads", Attribute::of_ints({0, 1, 1, 0})}, {"value", Attribute::of_float(-1.5f)}});
  const Tensor z = run_node(old, {Tensor::from_vector<float>({1, 2}, {1, 2})}, 2)[0];
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(as_doubles(z), (std::vector<double>{-1.5, 1, 2, -1.5, -1.5, -1.5}));
  // Opset 18: pads for the listed axes only.
  Node with_axes = make_node("Pad", 4, {{"mode", mode("edge")}});
  with_axes.inputs[2] = "";
  const Tensor w = run_node(with_axes, {x, ints({1, 0}), Tensor(), ints({-1})}, 18)[0];
  EXPECT_EQ(w.shape(), (Shape{2, 4}));
  EXPECT_EQ(as_doubles(w), (std::vector<double>{1, 1, 2, 3, 4, 4, 5, 6}));
}

TEST(Pad, RejectsBadPadsAndModes) {
  const Tensor x = Tensor::zeros(DType::Float32, {2, 3});
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("Pad", 2), {x, ints({1, 1})}, 13);
      },
      "pads [1, 1] must have 2 * 2 entries for input [2, 3]");
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("Pad", 2), {x, ints({0, -4, 0, 0})}, 13);
      },
      "pads [0, -4, 0, 0] crop axis 1 of input [2, 3] below zero");
  expect_error<Unsupported>(
      [&] {
        run_node(make_node("Pad", 2, {{"mode", mode("wrap")}}), {x, ints({0, 1, 0, 0})}, 13);
      },
      "mode 'wrap' is not supported");
}

// The spec's definition: DCR reads channel (i * b + j) * C' + c, CRD reads c * b * b + i * b + j.
TEST(DepthToSpace, DcrAndCrdMatchTheSpecFormula) {
  const int64_t n = 2, c = 3, h = 2, w = 3, b = 2, C = c * b * b;
  const Tensor x = filled(DType::Float32, {n, C, h, w}, 3);
  for (const char* m : {"DCR", "CRD"}) {
    const Tensor y =
        run_node(make_node("DepthToSpace", 1, {{"blocksize", Attribute::of_int(b)}, {"mode", mode(m)}}), {x}, 13)[0];
    ASSERT_EQ(y.shape(), (Shape{n, c, h * b, w * b}));
    const bool crd = std::string(m) == "CRD";
    for (int64_t in = 0; in < n; ++in)
      for (int64_t ic = 0; ic < c; ++ic)
        for (int64_t ih = 0; ih < h * b; ++ih)
          for (int64_t iw = 0; iw < w * b; ++iw) {
            const int64_t i = ih % b, j = iw % b;
            const int64_t src_c = crd ? ic * b * b + i * b + j : (i * b + j) * c + ic;
            const double want = x.item_as_double(((in * C + src_c) * h + ih / b) * w + iw / b);
            ASSERT_EQ(y.item_as_double(((in * c + ic) * h * b + ih) * w * b + iw), want) << m;
          }
  }
}

TEST(SpaceToDepth, InvertsDepthToSpaceDcr) {
  const Tensor x = filled(DType::Int16, {1, 2, 4, 6}, 3);
  const Tensor d = run_node(make_node("SpaceToDepth", 1, {{"blocksize", Attribute::of_int(2)}}), {x}, 13)[0];
  ASSERT_EQ(d.shape(), (Shape{1, 8, 2, 3}));
  // Spot value: output channel (i * b + j) * C + c at (h, w) is x[c, h * b + i, w * b + j].
  EXPECT_EQ(d.item_as_double(((1 * 2 + 1) * 2 + 1) * 3 + 2),  // i=0, j=1 -> channel 1*2+1 = 3; h=1, w=2
            x.item_as_double((1 * 4 + 2) * 6 + 5));
  const Tensor back = run_node(make_node("DepthToSpace", 1, {{"blocksize", Attribute::of_int(2)}}), {d}, 13)[0];
  EXPECT_EQ(as_doubles(back), as_doubles(x));
}

TEST(SpaceToDepth, RejectsIndivisibleShapes) {
  expect_error<ShapeError>(
      [] {
        run_node(make_node("SpaceToDepth", 1, {{"blocksize", Attribute::of_int(2)}}),
                 {Tensor::zeros(DType::Float32, {1, 1, 3, 4})}, 13);
      },
      "height and width of input [1, 1, 3, 4] must be multiples of blocksize 2");
  expect_error<ShapeError>(
      [] {
        run_node(make_node("DepthToSpace", 1, {{"blocksize", Attribute::of_int(2)}}),
                 {Tensor::zeros(DType::Float32, {1, 6, 1, 1})}, 13);
      },
      "channels of input [1, 6, 1, 1] (6) are not a multiple of blocksize^2 = 4");
}

}  // namespace
}  // namespace kiln

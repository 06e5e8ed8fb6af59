// Finite-difference checks of the Conv gradient (ai.kiln.ConvGrad): groups, depthwise, strides,
// dilations, asymmetric pads, auto_pad, 1-D/2-D/3-D, with and without bias, float64 (<= 1e-6)
// and float32 (<= 1e-3, which runs oneDNN's backward primitives).
#include <gtest/gtest.h>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"
#include "kiln/kernel.h"

namespace kiln::testing {
namespace {

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

Node conv(bool bias, std::map<std::string, Attribute> attrs) {
  Node n;
  n.op_type = "Conv";
  n.inputs = bias ? std::vector<std::string>{"x", "w", "b"} : std::vector<std::string>{"x", "w"};
  n.outputs = {"y"};
  n.attrs = std::move(attrs);
  return n;
}

struct Case {
  Shape x, w;
  std::map<std::string, Attribute> attrs;
};

void run_cases(const std::vector<Case>& cases, uint64_t seed) {
  for (const Case& c : cases) {
    for (bool bias : {true, false}) {
      std::vector<Tensor> in{random_tensor(c.x, ++seed), random_tensor(c.w, ++seed)};
      std::vector<size_t> wrt{0, 1};
      if (bias) {
        in.push_back(random_tensor({c.w[0]}, ++seed));
        wrt.push_back(2);
      }
      both({conv(bias, c.attrs), in, wrt, 17, seed});
    }
  }
}

TEST(ConvGradient, TwoDimensionalGeometries) {
  run_cases(
      {{{1, 3, 5, 5}, {4, 3, 3, 3}, {}},
       {{1, 2, 7, 6}, {3, 2, 3, 2}, {{"strides", ints({2, 1})}, {"pads", ints({1, 0, 2, 1})}}},
       {{1, 2, 7, 7},
        {2, 2, 2, 3},
        {{"dilations", ints({2, 2})}, {"strides", ints({1, 2})}, {"pads", ints({1, 1, 0, 2})}}},
       {{2, 4, 5, 5}, {6, 2, 3, 3}, {{"group", Attribute::of_int(2)}, {"pads", ints({1, 1, 1, 1})}}},
       {{1, 3, 6, 5}, {3, 1, 3, 3}, {{"group", Attribute::of_int(3)}, {"strides", ints({2, 2})}}},
       {{1, 2, 5, 6}, {2, 2, 3, 3}, {{"auto_pad", Attribute::of_string("SAME_UPPER")}, {"strides", ints({2, 2})}}},
       {{1, 2, 5, 6}, {2, 2, 2, 2}, {{"auto_pad", Attribute::of_string("SAME_LOWER")}}},
       {{1, 2, 5, 6}, {2, 2, 3, 3}, {{"auto_pad", Attribute::of_string("VALID")}, {"strides", ints({3, 2})}}}},
      100);
}

TEST(ConvGradient, OneAndThreeDimensional) {
  run_cases({{{2, 3, 9}, {2, 3, 3}, {{"strides", ints({2})}, {"dilations", ints({2})}, {"pads", ints({2, 1})}}},
             {{1, 2, 4, 4, 3}, {2, 1, 2, 3, 2}, {{"group", Attribute::of_int(2)}, {"pads", ints({1, 0, 1, 0, 1, 0})}}}},
            200);
}

// 8+ channels take oneDNN's blocked layouts (with reorders) in float32.
TEST(ConvGradient, BlockedLayoutChannels) {
  run_cases({{{1, 8, 4, 4}, {8, 8, 3, 3}, {{"pads", ints({1, 1, 1, 1})}}},
             {{1, 16, 4, 4}, {16, 1, 3, 3}, {{"group", Attribute::of_int(16)}, {"strides", ints({2, 2})}}}},
            300);
}

// Maps so small that outer taps read only padding (ResNet's last stages at 32x32): the backward
// primitives read the cropped weights and write the cropped taps of dW, the rest of dW is zero.
TEST(ConvGradient, TapsThatReadOnlyPaddingAreCropped) {
  run_cases({{{2, 8, 1, 1}, {4, 8, 3, 3}, {{"pads", ints({1, 1, 1, 1})}}},
             {{2, 8, 2, 1}, {4, 8, 3, 3}, {{"pads", ints({1, 1, 1, 1})}}},
             {{1, 8, 2, 2}, {4, 8, 5, 5}, {{"pads", ints({2, 2, 2, 2})}, {"strides", ints({2, 2})}}}},
            350);
}

// Only the weight needs a gradient (a first layer): the input gradient is not computed.
TEST(ConvGradient, WeightOnly) {
  both({conv(true, {{"pads", ints({1, 1, 1, 1})}}),
        {random_tensor({2, 3, 4, 4}, 401), random_tensor({2, 3, 3, 3}, 402), random_tensor({2}, 403)},
        {1},
        17,
        401});
}

// The float64 Conv loop (which the finite differences run) agrees with the oneDNN float32 kernel.
TEST(ConvGradient, Float64ForwardMatchesFloat32) {
  const Case c{{2, 4, 7, 6},
               {6, 2, 3, 2},
               {{"group", Attribute::of_int(2)},
                {"strides", ints({2, 1})},
                {"dilations", ints({1, 2})},
                {"pads", ints({1, 0, 2, 1})}}};
  const std::vector<Tensor> in{random_tensor(c.x, 450), random_tensor(c.w, 451), random_tensor({6}, 452)};
  std::vector<Tensor> in32;
  for (const Tensor& t : in) {
    Tensor f = Tensor::empty(DType::Float32, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) f.data<float>()[i] = float(t.data<double>()[i]);
    in32.push_back(f);
  }
  const Tensor y64 = run_node(conv(true, c.attrs), in)[0], y32 = run_node(conv(true, c.attrs), in32)[0];
  ASSERT_EQ(y64.shape(), y32.shape());
  for (int64_t i = 0; i < y64.numel(); ++i) ASSERT_NEAR(y64.data<double>()[i], y32.data<float>()[i], 1e-5) << i;
}

TEST(ConvGradient, OutputMaskLeavesOutputsEmpty) {
  Node n;
  n.domain = "ai.kiln";
  n.op_type = "ConvGrad";
  n.inputs = {"dy", "x", "w"};
  n.outputs = {"dx", "dw", "db"};
  n.attrs["output_mask"] = ints({0, 1, 0});
  const Tensor x = random_tensor({1, 2, 4, 4}, 501), w = random_tensor({3, 2, 3, 3}, 502);
  const Tensor dy = random_tensor({1, 3, 2, 2}, 503);
  const std::vector<Tensor> out = run_node(n, {dy, x, w}, 17);
  EXPECT_EQ(out[0].shape(), (Shape{0}));
  EXPECT_EQ(out[1].shape(), (Shape{3, 2, 3, 3}));
  EXPECT_EQ(out[2].shape(), (Shape{0}));
  // dW[m, c, kh, kw] = sum_{oh, ow} dY[m, oh, ow] X[c, oh + kh, ow + kw]
  double expect = 0;
  for (int oh = 0; oh < 2; ++oh)
    for (int ow = 0; ow < 2; ++ow)
      expect += dy.data<double>()[(1 * 2 + oh) * 2 + ow] * x.data<double>()[(0 * 4 + oh + 2) * 4 + ow + 1];
  EXPECT_NEAR(out[1].data<double>()[((1 * 2 + 0) * 3 + 2) * 3 + 1], expect, 1e-12);
}

TEST(ConvGradient, MismatchedOutputGradientIsAShapeError) {
  Node n;
  n.domain = "ai.kiln";
  n.op_type = "ConvGrad";
  n.inputs = {"dy", "x", "w"};
  n.outputs = {"dx", "dw", "db"};
  EXPECT_THROW(
      run_node(n, {random_tensor({1, 3, 3, 3}, 1), random_tensor({1, 2, 4, 4}, 2), random_tensor({3, 2, 3, 3}, 3)}),
      ShapeError);
}

}  // namespace
}  // namespace kiln::testing

// The layout pass's kernels (ai.kiln.ConvChannelsLast, *PoolChannelsLast) against the standard ops
// on the same data permuted: Conv with groups, strides, dilations, asymmetric pads, the fused Relu,
// a channels-first input, the one-product shortcut of 1x1 output maps (the whole input, and a
// strided first element); MaxPool, AveragePool (padding counted or not, ceil_mode), the global
// pools; a residual added before the Relu (the output's shape, in place, broadcast either way);
// BatchNormalization in inference mode.
// Float32: within 1e-5 of the standard op (the same oneDNN arithmetic in another order).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>

#include "kernels/channels_last_util.h"
#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

std::vector<ConvCase> conv_cases() {
  using A = Attribute;
  return {
      {"3x3 pad 1", {2, 8, 9, 7}, {16, 8, 3, 3}, {{"pads", A::of_ints({1, 1, 1, 1})}}},
      {"strided, asymmetric pads",
       {2, 6, 11, 10},
       {5, 6, 3, 2},
       {{"strides", A::of_ints({2, 3})}, {"pads", A::of_ints({0, 1, 2, 0})}}},
      {"dilated", {1, 4, 12, 12}, {8, 4, 3, 3}, {{"dilations", A::of_ints({2, 2})}}},
      {"grouped", {2, 8, 6, 6}, {12, 2, 3, 3}, {{"group", A::of_int(4)}, {"pads", A::of_ints({1, 1, 1, 1})}}},
      {"depthwise", {2, 16, 7, 7}, {16, 1, 3, 3}, {{"group", A::of_int(16)}, {"pads", A::of_ints({1, 1, 1, 1})}}},
      // LeNet's first convolution: one input channel, read channels last either way (same bytes).
      {"one input channel", {3, 1, 28, 28}, {6, 1, 5, 5}, {{"pads", A::of_ints({2, 2, 2, 2})}}},
      {"three input channels",
       {2, 3, 16, 16},
       {8, 3, 7, 7},
       {{"strides", A::of_ints({2, 2})}, {"pads", A::of_ints({3, 3, 3, 3})}}},
      // One output position: one matrix product over the whole 2x2 input, and a strided 1x1.
      {"one product, whole input",
       {3, 16, 2, 2},
       {32, 16, 3, 3},
       {{"strides", A::of_ints({2, 2})}, {"pads", A::of_ints({1, 1, 1, 1})}}},
      {"one product, first element", {3, 16, 2, 2}, {32, 16, 1, 1}, {{"strides", A::of_ints({2, 2})}}},
      {"3x3 over 1x1", {4, 8, 1, 1}, {8, 8, 3, 3}, {{"pads", A::of_ints({1, 1, 1, 1})}}},
  };
}

TEST(ConvChannelsLast, MatchesConvOnPermutedData) {
  uint32_t seed = 1;
  for (const ConvCase& c : conv_cases()) {
    const Tensor x = random_f32(c.x, seed++, -1.f, 1.f);
    const Tensor w = random_f32(c.w, seed++, -1.f, 1.f);
    const Tensor b = random_f32({c.w[0]}, seed++, -1.f, 1.f);
    const Node conv = make_node("Conv", 3, c.attrs);
    const Tensor want = run1(conv, {x, w, b});
    Tensor relu = want.clone();
    for (int64_t i = 0; i < relu.numel(); ++i) relu.data<float>()[i] = std::max(0.f, relu.data<float>()[i]);
    Node cl = kiln_node(conv, "ConvChannelsLast");
    expect_near(to_nchw(run1(cl, {to_nhwc(x), w, b})), want, 1e-5, c.name);
    cl.attrs["input_channels_last"] = Attribute::of_int(0);
    expect_near(to_nchw(run1(cl, {x, w, b})), want, 1e-5, c.name + ", channels-first input");
    cl.attrs["activation"] = Attribute::of_string("Relu");
    expect_near(to_nchw(run1(cl, {x, w, b})), relu, 1e-5, c.name + ", Relu");
    cl.attrs["input_channels_last"] = Attribute::of_int(1);
    expect_near(to_nchw(run1(cl, {to_nhwc(x), w, b})), relu, 1e-5, c.name + ", channels last, Relu");
    Node no_bias = kiln_node(make_node("Conv", 2, c.attrs), "ConvChannelsLast");
    expect_near(to_nchw(run1(no_bias, {to_nhwc(x), w})), run1(make_node("Conv", 2, c.attrs), {x, w}), 1e-5,
                c.name + ", no bias");
  }
}

// relu(a + b), rank 4, each broadcast to the other's shape.
Tensor add_relu(const Tensor& a, const Tensor& b, bool relu) {
  const Shape out = broadcast_shapes(a.shape(), b.shape());
  auto offset = [&](const Tensor& t, const std::array<int64_t, 4>& i) {
    int64_t o = 0;
    for (size_t d = 0; d < 4; ++d) o = o * t.shape()[d] + (t.shape()[d] == 1 ? 0 : i[d]);
    return o;
  };
  Tensor y = Tensor::empty(DType::Float32, out);
  int64_t k = 0;
  for (int64_t i0 = 0; i0 < out[0]; ++i0)
    for (int64_t i1 = 0; i1 < out[1]; ++i1)
      for (int64_t i2 = 0; i2 < out[2]; ++i2)
        for (int64_t i3 = 0; i3 < out[3]; ++i3, ++k) {
          const float v = a.data<float>()[offset(a, {i0, i1, i2, i3})] + b.data<float>()[offset(b, {i0, i1, i2, i3})];
          y.data<float>()[k] = relu ? std::max(0.f, v) : v;
        }
  return y;
}

TEST(ConvChannelsLast, AddsAResidual) {
  // The residual the output's shape (oneDNN's sum post-op; also written in place over the residual,
  // as a Session plans it when nothing reads the residual later), and broadcast either way.
  uint32_t seed = 40;
  for (const ConvCase& c : conv_cases()) {
    const Tensor x = to_nhwc(random_f32(c.x, seed++, -1.f, 1.f));
    const Tensor w = random_f32(c.w, seed++, -1.f, 1.f);
    const Tensor b = random_f32({c.w[0]}, seed++, -1.f, 1.f);
    Node cl = kiln_node(make_node("Conv", 4, c.attrs), "ConvChannelsLast");
    const Tensor conv = run1(kiln_node(make_node("Conv", 3, c.attrs), "ConvChannelsLast"), {x, w, b});
    const Shape& y = conv.shape();
    for (bool relu : {false, true}) {
      if (relu) cl.attrs["activation"] = Attribute::of_string("Relu");
      const std::string what = c.name + (relu ? ", Relu" : "");
      const Tensor r = random_f32(y, seed++, -1.f, 1.f);
      expect_near(run1(cl, {x, w, b, r}), add_relu(conv, r, relu), 1e-5, what);
      std::vector<Tensor> in{x, w, b, r.clone()};
      expect_near(run_aliased(cl, in, {3}).at(0), add_relu(conv, r, relu), 1e-5, what + ", in place");
      const Tensor per_channel = random_f32({y[0], 1, 1, y[3]}, seed++, -1.f, 1.f);
      expect_near(run1(cl, {x, w, b, per_channel}), add_relu(conv, per_channel, relu), 1e-5, what + ", broadcast");
      const Tensor larger = random_f32({y[0], y[1] + 2, 3, y[3]}, seed++, -1.f, 1.f);
      if (y[1] == 1 && y[2] == 1)  // a 1x1 map broadcast onto a larger one
        expect_near(run1(cl, {x, w, b, larger}), add_relu(conv, larger, relu), 1e-5, what + ", onto a larger map");
    }
  }
}

TEST(ConvChannelsLast, BadInputsAreErrorsNamingThem) {
  const Node cl = kiln_node(make_node("Conv", 2), "ConvChannelsLast");
  expect_error<ShapeError>(
      [&] {
        run1(cl, {random_f32({1, 5, 4}, 1, 0.f, 1.f), random_f32({2, 4, 3}, 2, 0.f, 1.f)});
      },
      {"ConvChannelsLast", "rank 4", "float[1, 5, 4]"});
  // Channels last: [1, 5, 5, 3] has 3 channels, the weight wants 4.
  expect_error<ShapeError>(
      [&] {
        run1(cl, {random_f32({1, 5, 5, 3}, 1, 0.f, 1.f), random_f32({2, 4, 3, 3}, 2, 0.f, 1.f)});
      },
      {"3 channels", "float[2, 4, 3, 3]"});
  Node tanh = cl;
  tanh.attrs["activation"] = Attribute::of_string("Tanh");
  expect_error<InvalidModel>(
      [&] {
        run1(tanh, {random_f32({1, 5, 5, 4}, 1, 0.f, 1.f), random_f32({2, 4, 3, 3}, 2, 0.f, 1.f)});
      },
      {"activation 'Tanh'"});
  const Node residual = kiln_node(make_node("Conv", 4), "ConvChannelsLast");
  expect_error<ShapeError>(
      [&] {
        run1(residual, {random_f32({1, 5, 5, 4}, 1, 0.f, 1.f), random_f32({2, 4, 3, 3}, 2, 0.f, 1.f), Tensor(),
                        random_f32({1, 3, 4, 2}, 3, 0.f, 1.f)});
      },
      {"ConvChannelsLast", "[1, 3, 3, 2]", "[1, 3, 4, 2]"});
  expect_error<TypeError>(
      [&] {
        run1(residual, {random_f32({1, 5, 5, 4}, 1, 0.f, 1.f), random_f32({2, 4, 3, 3}, 2, 0.f, 1.f), Tensor(),
                        Tensor::zeros(DType::Float64, {1, 3, 3, 2})});
      },
      {"residual", "double[1, 3, 3, 2]", "output's dtype"});
}

TEST(BatchNormalizationChannelsLast, MatchesBatchNormalizationOnPermutedData) {
  const Tensor x = random_f32({2, 6, 5, 7}, 50, -3.f, 3.f);
  const std::vector<Tensor> params{random_f32({6}, 51, 0.5f, 2.f), random_f32({6}, 52, -1.f, 1.f),
                                   random_f32({6}, 53, -1.f, 1.f), random_f32({6}, 54, 0.1f, 2.f)};
  const Node bn = make_node("BatchNormalization", 5, {{"epsilon", Attribute::of_float(1e-3f)}});
  std::vector<Tensor> in{x};
  in.insert(in.end(), params.begin(), params.end());
  const Tensor want = run1(bn, in);
  in[0] = to_nhwc(x);
  expect_near(to_nchw(run1(kiln_node(bn, "BatchNormalizationChannelsLast"), in)), want, 1e-5, "BatchNormalization");
}

TEST(BatchNormalizationChannelsLast, BadInputsAreErrorsNamingThem) {
  const Node bn = kiln_node(make_node("BatchNormalization", 5), "BatchNormalizationChannelsLast");
  const Tensor p = random_f32({3}, 1, 0.5f, 1.f);
  expect_error<ShapeError>(
      [&] {
        run1(bn, {random_f32({2, 4, 3}, 2, 0.f, 1.f), p, p, p, p});
      },
      {"BatchNormalizationChannelsLast", "rank 4", "float[2, 4, 3]"});
  expect_error<ShapeError>(
      [&] {
        run1(bn, {random_f32({2, 4, 4, 5}, 2, 0.f, 1.f), p, p, p, p});
      },
      {"scale float[3]", "float[5]"});
  // The registry has the float32 kernel only: another dtype is refused by name.
  expect_error<Unsupported>(
      [&] {
        run1(bn, {Tensor::zeros(DType::Float64, {2, 4, 4, 3}), p, p, p, p});
      },
      {"BatchNormalizationChannelsLast", "dtype double", "float"});
}

TEST(PoolChannelsLast, MatchesThePoolsOnPermutedData) {
  const Tensor x = random_f32({2, 16, 9, 11}, 7, -3.f, 3.f);
  for (const auto& [op, attrs] : pool_cases()) {
    const Node pool = make_node(op, 1, attrs);
    expect_near(to_nchw(run1(kiln_node(pool, op + "ChannelsLast"), {to_nhwc(x)})), run1(pool, {x}), 1e-5, op);
  }
  for (const std::string op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    const Node pool = make_node(op, 1);
    for (const Shape& s : {Shape{2, 16, 9, 11}, Shape{3, 8, 1, 1}}) {
      const Tensor in = random_f32(s, 9, -3.f, 3.f);
      // Channels last in, [N, C, 1, 1] channels first out.
      expect_near(run1(kiln_node(pool, op + "ChannelsLast"), {to_nhwc(in)}), run1(pool, {in}), 1e-5, op);
    }
  }
}

TEST(PoolChannelsLast, WhatTheyDoNotTakeIsAnError) {
  using A = Attribute;
  Node indices = kiln_node(make_node("MaxPool", 1, {{"kernel_shape", A::of_ints({2, 2})}}, 2), "MaxPoolChannelsLast");
  expect_error<InvalidModel>(
      [&] {
        run_node(indices, {random_f32({1, 4, 4, 2}, 1, 0.f, 1.f)});
      },
      {"no Indices output"});
  const Node counted = kiln_node(make_node("AveragePool", 1,
                                           {{"kernel_shape", A::of_ints({2, 2})},
                                            {"strides", A::of_ints({2, 2})},
                                            {"ceil_mode", A::of_int(1)},
                                            {"count_include_pad", A::of_int(1)}}),
                                 "AveragePoolChannelsLast");
  expect_error<Unsupported>([&] { run1(counted, {random_f32({1, 5, 5, 2}, 1, 0.f, 1.f)}); }, {"count_include_pad"});
  const Node global = kiln_node(make_node("GlobalAveragePool", 1), "GlobalAveragePoolChannelsLast");
  expect_error<ShapeError>([&] { run1(global, {random_f32({1, 5, 2}, 1, 0.f, 1.f)}); }, {"rank 4", "[N, H, W, C]"});
}

}  // namespace
}  // namespace kiln

// Conv against a naive double-precision reference on random inputs: groups, depthwise, strides,
// dilations, asymmetric pads, auto_pad, 1-D and 3-D.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "kiln/session.h"
#include "runtime/runtime_test_util.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

struct ConvCase {
  std::string name;
  Shape x, w;
  int64_t group = 1;
  std::vector<int64_t> strides, dilations, pads;  // empty: attribute omitted
  std::string auto_pad;                           // empty: omitted
  bool bias = true;
};

// The reference: ONNX's Conv definition evaluated directly in double. Spatial dims are padded to
// three (size 1, kernel 1) so one loop nest serves 1-D, 2-D and 3-D.
std::vector<double> ref_conv(const ConvCase& c, const Tensor& x, const Tensor& w, const Tensor* b, Shape& y_shape) {
  const size_t nsp = c.x.size() - 2;
  std::vector<int64_t> in(3, 1), k(3, 1), s(3, 1), d(3, 1), pb(3, 0), out(3, 1);
  const size_t off = 3 - nsp;
  for (size_t i = 0; i < nsp; ++i) {
    in[off + i] = c.x[2 + i];
    k[off + i] = c.w[2 + i];
    if (!c.strides.empty()) s[off + i] = c.strides[i];
    if (!c.dilations.empty()) d[off + i] = c.dilations[i];
    const int64_t ext = (k[off + i] - 1) * d[off + i] + 1;
    if (c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
      out[off + i] = (in[off + i] + s[off + i] - 1) / s[off + i];
      const int64_t total = std::max<int64_t>(0, (out[off + i] - 1) * s[off + i] + ext - in[off + i]);
      pb[off + i] = c.auto_pad == "SAME_UPPER" ? total / 2 : (total + 1) / 2;
    } else {
      const int64_t p0 = c.pads.empty() ? 0 : c.pads[i], p1 = c.pads.empty() ? 0 : c.pads[nsp + i];
      pb[off + i] = p0;
      out[off + i] = (in[off + i] + p0 + p1 - ext) / s[off + i] + 1;
    }
  }
  const int64_t n = c.x[0], cin = c.x[1], m = c.w[0], cg = cin / c.group, mg = m / c.group;
  y_shape = {n, m};
  for (size_t i = 0; i < nsp; ++i) y_shape.push_back(out[off + i]);
  std::vector<double> y;
  for (int64_t ni = 0; ni < n; ++ni)
    for (int64_t mi = 0; mi < m; ++mi)
      for (int64_t o0 = 0; o0 < out[0]; ++o0)
        for (int64_t o1 = 0; o1 < out[1]; ++o1)
          for (int64_t o2 = 0; o2 < out[2]; ++o2) {
            double acc = b ? b->item_as_double(mi) : 0.0;
            const int64_t g = mi / mg;
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t k0 = 0; k0 < k[0]; ++k0)
                for (int64_t k1 = 0; k1 < k[1]; ++k1)
                  for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                    const int64_t i0 = o0 * s[0] - pb[0] + k0 * d[0];
                    const int64_t i1 = o1 * s[1] - pb[1] + k1 * d[1];
                    const int64_t i2 = o2 * s[2] - pb[2] + k2 * d[2];
                    if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                    const int64_t xi = (((ni * cin + g * cg + ci) * in[0] + i0) * in[1] + i1) * in[2] + i2;
                    const int64_t wi = (((mi * cg + ci) * k[0] + k0) * k[1] + k1) * k[2] + k2;
                    acc += x.item_as_double(xi) * w.item_as_double(wi);
                  }
            y.push_back(acc);
          }
  return y;
}

Node conv_node(const ConvCase& c) {
  Node n;
  n.name = "conv";
  n.op_type = "Conv";
  n.inputs = {"x", "w"};
  if (c.bias) n.inputs.push_back("b");
  n.outputs = {"y"};
  if (c.group != 1) n.attrs["group"] = Attribute::of_int(c.group);
  if (!c.strides.empty()) n.attrs["strides"] = Attribute::of_ints(c.strides);
  if (!c.dilations.empty()) n.attrs["dilations"] = Attribute::of_ints(c.dilations);
  if (!c.pads.empty()) n.attrs["pads"] = Attribute::of_ints(c.pads);
  if (!c.auto_pad.empty()) n.attrs["auto_pad"] = Attribute::of_string(c.auto_pad);
  return n;
}

TEST(Conv, MatchesReference) {
  const std::vector<ConvCase> cases = {
      {"basic 2-D, pads 1", {2, 3, 9, 8}, {4, 3, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
      {"no bias", {1, 3, 6, 6}, {2, 3, 3, 3}, 1, {}, {}, {}, "", false},
      {"groups", {1, 4, 7, 7}, {6, 2, 3, 3}, 2, {}, {}, {1, 1, 1, 1}},
      {"depthwise, stride 2", {2, 8, 10, 10}, {8, 1, 3, 3}, 8, {2, 2}, {}, {1, 1, 1, 1}},
      {"stride+dilation+asymmetric pads", {1, 3, 11, 9}, {5, 3, 3, 2}, 1, {2, 3}, {2, 1}, {1, 0, 2, 3}},
      {"SAME_UPPER", {1, 2, 8, 7}, {3, 2, 4, 2}, 1, {2, 2}, {}, {}, "SAME_UPPER"},
      {"SAME_LOWER", {1, 2, 8, 7}, {3, 2, 4, 2}, 1, {2, 2}, {}, {}, "SAME_LOWER"},
      {"VALID", {1, 2, 8, 7}, {3, 2, 3, 2}, 1, {2, 3}, {}, {}, "VALID"},
      {"1-D", {2, 3, 17}, {4, 3, 5}, 1, {2}, {2}, {2, 1}},
      {"3-D", {1, 2, 5, 6, 7}, {3, 2, 2, 3, 2}, 1, {1, 2, 1}, {1, 1, 2}, {0, 1, 1, 1, 0, 1}},
      {"1x1 pointwise", {2, 16, 5, 5}, {8, 16, 1, 1}, 1},
      // Weights and outputs take oneDNN's layouts (with reorders) everywhere, inputs from 4 channels
      // on (conv_common.h): first layers with 1-3 channels read a plain input.
      {"LeNet's first layer", {3, 1, 28, 28}, {6, 1, 5, 5}, 1, {}, {}, {2, 2, 2, 2}},
      {"ResNet's stem", {2, 3, 32, 32}, {64, 3, 7, 7}, 1, {2, 2}, {}, {3, 3, 3, 3}, "", false},
      {"6 channels", {2, 6, 14, 14}, {16, 6, 5, 5}, 1},
      {"wide groups, stride+dilation+asymmetric pads", {2, 16, 9, 10}, {8, 4, 3, 3}, 4, {2, 1}, {2, 2}, {0, 2, 1, 1}},
      {"wide SAME_LOWER", {1, 12, 7, 6}, {12, 12, 2, 2}, 1, {2, 2}, {}, {}, "SAME_LOWER"},
      // Taps that read only padding are cropped (conv.cpp crop_taps), and a convolution with one
      // output position whose cropped window reads the whole input, or its first element, is one
      // matrix product.
      {"3x3 over 1x1, pads 1: one product", {4, 32, 1, 1}, {24, 32, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
      {"3x3 stride 2 over 2x2: one product of 2x2 taps", {3, 16, 2, 2}, {20, 16, 3, 3}, 1, {2, 2}, {}, {1, 1, 1, 1}},
      {"1x1 stride 2 over 2x2: one product of the first element", {3, 16, 2, 2}, {20, 16, 1, 1}, 1, {2, 2}},
      {"no bias, one product", {2, 8, 1, 1}, {5, 8, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, "", false},
      {"1-D one product", {2, 6, 1}, {4, 6, 3}, 1, {}, {}, {1, 1}},
      {"3-D one product", {2, 4, 1, 1, 1}, {5, 4, 3, 3, 3}, 1, {}, {}, {1, 1, 1, 1, 1, 1}},
      {"rows cropped, columns whole", {2, 8, 1, 5}, {6, 8, 3, 3}, 1, {}, {}, {1, 1, 1, 1}},
      {"cropped with dilation 2", {2, 8, 1, 4}, {6, 8, 3, 3}, 1, {}, {2, 2}, {2, 2, 2, 2}},
      {"cropped groups", {2, 8, 1, 1}, {6, 4, 3, 3}, 2, {}, {}, {1, 1, 1, 1}},
      {"asymmetric pads, cropped end taps", {2, 8, 2, 3}, {6, 8, 3, 3}, 1, {}, {}, {0, 0, 2, 2}},
  };
  uint32_t seed = 10;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x = random_f32(c.x, seed++, -1.f, 1.f), w = random_f32(c.w, seed++, -1.f, 1.f);
    Tensor b = c.bias ? random_f32({c.w[0]}, seed++, -1.f, 1.f) : Tensor();
    Shape want_shape;
    const std::vector<double> ref = ref_conv(c, x, w, c.bias ? &b : nullptr, want_shape);
    std::vector<Tensor> in = {x, w};
    if (c.bias) in.push_back(b);
    const Tensor y = run_node(conv_node(c), in).at(0);
    ASSERT_EQ(y.shape(), want_shape);
    double scale = 0, err = 0;
    for (double v : ref) scale = std::max(scale, std::abs(v));
    for (int64_t i = 0; i < y.numel(); ++i) err = std::max(err, std::abs(y.item_as_double(i) - ref[size_t(i)]));
    EXPECT_LE(err, 1e-5 * scale) << "max abs err " << err << ", max |ref| " << scale;
  }
}

TEST(Conv, ChannelMismatchNamesBothShapes) {
  ConvCase c{"bad", {1, 3, 8, 8}, {16, 4, 3, 3}, 1};
  expect_error<ShapeError>(
      [&] {
        run_node(conv_node(c),
                 {random_f32(c.x, 1, -1.f, 1.f), random_f32(c.w, 2, -1.f, 1.f), random_f32({16}, 3, -1.f, 1.f)});
      },
      {"input float[1, 3, 8, 8] has 3 channels but weight float[16, 4, 3, 3] expects 4 (group 1)",
       "node 'conv' (Conv)"});
  ConvCase too_small{"kernel larger than input", {1, 1, 2, 2}, {1, 1, 3, 3}, 1};
  EXPECT_THROW(run_node(conv_node(too_small), {random_f32(too_small.x, 1, -1.f, 1.f),
                                               random_f32(too_small.w, 2, -1.f, 1.f), random_f32({1}, 3, -1.f, 1.f)}),
               ShapeError);
}

// An initializer's weights are reordered into oneDNN's layout once, when the Session plans (conv.cpp):
// every run, and a second plan for another batch size, must still compute with those weights, and a
// fed weight that overrides the initializer must be read on every run.
TEST(Conv, ConstantWeightsPackedAtPlanTimeMatchTheReference) {
  const ConvCase c{"initializer weights", {2, 16, 9, 9}, {24, 16, 3, 3}, 1, {}, {}, {1, 1, 1, 1}, "", false};
  const Tensor w = random_f32(c.w, 40, -1.f, 1.f);
  Model m;
  m.opsets = {{"", 17}};
  m.graph.inputs = {kiln::test::float_info("x", {-1, 16, 9, 9})};
  m.graph.overridable_initializers = {kiln::test::float_info("w", c.w)};
  ValueInfo y;
  y.name = "y";
  m.graph.outputs = {y};
  m.graph.initializers["w"] = w;
  m.graph.nodes = {conv_node(c)};
  Session session(std::move(m));
  const auto check = [&](const Tensor& x, const Tensor& weight, const std::map<std::string, Tensor>& feeds) {
    ConvCase batch = c;
    batch.x = x.shape();
    Shape shape;
    const std::vector<double> ref = ref_conv(batch, x, weight, nullptr, shape);
    const Tensor y = session.run(feeds).at("y");
    ASSERT_EQ(y.shape(), shape);
    double scale = 0, err = 0;
    for (double v : ref) scale = std::max(scale, std::abs(v));
    for (int64_t i = 0; i < y.numel(); ++i) err = std::max(err, std::abs(y.item_as_double(i) - ref[size_t(i)]));
    EXPECT_LE(err, 1e-5 * scale) << "max abs err " << err << ", max |ref| " << scale;
  };
  uint32_t seed = 41;
  for (int64_t batch : {2, 2, 3, 2}) {
    const Tensor x = random_f32({batch, 16, 9, 9}, seed++, -1.f, 1.f);
    check(x, w, {{"x", x}});
  }
  const Tensor fed = random_f32(c.w, seed++, -1.f, 1.f), x = random_f32(c.x, seed++, -1.f, 1.f);
  check(x, fed, {{"x", x}, {"w", fed}});
}

// The one-product path (3x3 over a 1x1 map) copies an initializer's cropped taps once, at plan time.
TEST(Conv, ConstantWeightsOfAOneProductConvolutionMatchTheReference) {
  const ConvCase c{"initializer weights, one product", {3, 16, 1, 1}, {12, 16, 3, 3}, 1, {}, {}, {1, 1, 1, 1}};
  const Tensor w = random_f32(c.w, 60, -1.f, 1.f), b = random_f32({12}, 61, -1.f, 1.f);
  Model m;
  m.opsets = {{"", 17}};
  m.graph.inputs = {kiln::test::float_info("x", {-1, 16, 1, 1})};
  ValueInfo y;
  y.name = "y";
  m.graph.outputs = {y};
  m.graph.initializers["w"] = w;
  m.graph.initializers["b"] = b;
  m.graph.nodes = {conv_node(c)};
  Session session(std::move(m));
  for (uint32_t seed : {62u, 63u}) {
    const Tensor x = random_f32(c.x, seed, -1.f, 1.f);
    Shape shape;
    const std::vector<double> ref = ref_conv(c, x, w, &b, shape);
    const Tensor out = session.run({{"x", x}}).at("y");
    ASSERT_EQ(out.shape(), shape);
    for (int64_t i = 0; i < out.numel(); ++i) EXPECT_NEAR(out.item_as_double(i), ref[size_t(i)], 1e-4) << i;
  }
}

}  // namespace
}  // namespace kiln

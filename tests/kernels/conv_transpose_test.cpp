// ConvTranspose against a naive double-precision gather-form reference (each output position sums
// the input positions that reach it), over groups, strides, dilations, pads, output_padding,
// output_shape, auto_pad, 1-D to 3-D, float32 (oneDNN) and float64 (direct loop).
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

struct Case {
  std::string name;
  Shape x, w;
  int64_t group = 1;
  std::vector<int64_t> strides, dilations, pads, output_padding, output_shape;
  std::string auto_pad;
  Shape want;                      // expected output shape, worked out by hand from ONNX's formulas
  std::vector<int64_t> pad_begin;  // the begin padding those formulas give
};

Node node_of(const Case& c, bool bias) {
  Node n;
  n.name = "deconv";
  n.op_type = "ConvTranspose";
  n.inputs = {"x", "w"};
  if (bias) n.inputs.push_back("b");
  n.outputs = {"y"};
  if (c.group != 1) n.attrs["group"] = Attribute::of_int(c.group);
  if (!c.strides.empty()) n.attrs["strides"] = Attribute::of_ints(c.strides);
  if (!c.dilations.empty()) n.attrs["dilations"] = Attribute::of_ints(c.dilations);
  if (!c.pads.empty()) n.attrs["pads"] = Attribute::of_ints(c.pads);
  if (!c.output_padding.empty()) n.attrs["output_padding"] = Attribute::of_ints(c.output_padding);
  if (!c.output_shape.empty()) n.attrs["output_shape"] = Attribute::of_ints(c.output_shape);
  if (!c.auto_pad.empty()) n.attrs["auto_pad"] = Attribute::of_string(c.auto_pad);
  return n;
}

// y[n, oc, o] = b[oc] + sum over ic in oc's group, taps k, inputs i with i*s - p + k*d == o.
std::vector<double> reference(const Case& c, const Tensor& x, const Tensor& w, const Tensor* b) {
  const size_t nsp = c.x.size() - 2, off = 3 - nsp;
  std::vector<int64_t> in(3, 1), out(3, 1), k(3, 1), s(3, 1), d(3, 1), p(3, 0);
  for (size_t i = 0; i < nsp; ++i) {
    in[off + i] = c.x[2 + i];
    out[off + i] = c.want[2 + i];
    k[off + i] = c.w[2 + i];
    if (!c.strides.empty()) s[off + i] = c.strides[i];
    if (!c.dilations.empty()) d[off + i] = c.dilations[i];
    p[off + i] = c.pad_begin[i];
  }
  const int64_t cin = c.x[1], mg = c.w[1], m = mg * c.group, cg = cin / c.group;
  std::vector<double> y;
  for (int64_t n = 0; n < c.x[0]; ++n)
    for (int64_t oc = 0; oc < m; ++oc)
      for (int64_t o0 = 0; o0 < out[0]; ++o0)
        for (int64_t o1 = 0; o1 < out[1]; ++o1)
          for (int64_t o2 = 0; o2 < out[2]; ++o2) {
            double acc = b ? b->item_as_double(oc) : 0.0;
            const int64_t g = oc / mg;
            for (int64_t icg = 0; icg < cg; ++icg) {
              const int64_t ic = g * cg + icg;
              for (int64_t k0 = 0; k0 < k[0]; ++k0)
                for (int64_t k1 = 0; k1 < k[1]; ++k1)
                  for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                    const int64_t n0 = o0 + p[0] - k0 * d[0], n1 = o1 + p[1] - k1 * d[1], n2 = o2 + p[2] - k2 * d[2];
                    if (n0 % s[0] || n1 % s[1] || n2 % s[2]) continue;
                    const int64_t i0 = n0 / s[0], i1 = n1 / s[1], i2 = n2 / s[2];
                    if (n0 < 0 || n1 < 0 || n2 < 0 || i0 >= in[0] || i1 >= in[1] || i2 >= in[2]) continue;
                    const int64_t xi = (((n * cin + ic) * in[0] + i0) * in[1] + i1) * in[2] + i2;
                    const int64_t wi = (((ic * mg + oc % mg) * k[0] + k0) * k[1] + k1) * k[2] + k2;
                    acc += x.item_as_double(xi) * w.item_as_double(wi);
                  }
            }
            y.push_back(acc);
          }
  return y;
}

TEST(ConvTranspose, MatchesReference) {
  const std::vector<Case> cases = {
      {"basic", {2, 3, 5, 4}, {3, 2, 3, 3}, 1, {}, {}, {}, {}, {}, "", {2, 2, 7, 6}, {0, 0}},
      {"strides, pads", {1, 2, 4, 5}, {2, 3, 3, 2}, 1, {2, 3}, {}, {1, 0, 1, 1}, {}, {}, "", {1, 3, 7, 13}, {1, 0}},
      {"dilations, output_padding",
       {1, 2, 4, 4},
       {2, 2, 2, 3},
       1,
       {2, 2},
       {2, 1},
       {},
       {1, 0},
       {},
       "",
       {1, 2, 10, 9},
       {0, 0}},
      {"groups", {2, 4, 3, 3}, {4, 3, 2, 2}, 2, {2, 2}, {}, {}, {}, {}, "", {2, 6, 6, 6}, {0, 0}},
      // Larger than the full line (9x7): the extra row and column get only the bias.
      {"output_shape past the full line",
       {1, 1, 3, 3},
       {1, 2, 3, 3},
       1,
       {3, 2},
       {},
       {},
       {},
       {10, 8},
       "",
       {1, 2, 10, 8},
       {0, 0}},
      // Smaller than the full line (full 9x7, total pads 2 and 1; NOTSET puts the odd one first).
      {"output_shape cropping", {1, 1, 3, 3}, {1, 2, 3, 3}, 1, {3, 2}, {}, {}, {}, {7, 6}, "", {1, 2, 7, 6}, {1, 1}},
      {"SAME_UPPER", {1, 2, 3, 4}, {2, 1, 3, 3}, 1, {2, 2}, {}, {}, {}, {}, "SAME_UPPER", {1, 1, 6, 8}, {0, 0}},
      {"SAME_LOWER", {1, 2, 3, 4}, {2, 1, 3, 3}, 1, {2, 2}, {}, {}, {}, {}, "SAME_LOWER", {1, 1, 6, 8}, {1, 1}},
      {"1-D", {2, 3, 7}, {3, 2, 4}, 1, {3}, {}, {2, 1}, {}, {}, "", {2, 2, 19}, {2}},
      {"3-D",
       {1, 2, 3, 4, 2},
       {2, 2, 2, 2, 3},
       1,
       {1, 2, 2},
       {},
       {0, 1, 0, 1, 0, 1},
       {},
       {},
       "",
       {1, 2, 3, 7, 4},
       {0, 1, 0}},
      // 8+ channels take oneDNN's blocked layouts (with reorders).
      {"wide, grouped",
       {2, 16, 5, 6},
       {16, 4, 3, 3},
       2,
       {2, 1},
       {1, 2},
       {1, 1, 0, 2},
       {1, 0},
       {},
       "",
       {2, 8, 11, 7},
       {1, 1}},
  };
  uint32_t seed = 100;
  for (DType dt : {DType::Float32, DType::Float64})
    for (const Case& c : cases)
      for (bool bias : {true, false}) {
        SCOPED_TRACE(fmt::format("{} {} bias={}", c.name, dtype_name(dt), bias));
        Tensor x = random_real(dt, c.x, seed++, -1.0, 1.0), w = random_real(dt, c.w, seed++, -1.0, 1.0);
        Tensor b = random_real(dt, {c.w[1] * c.group}, seed++, -1.0, 1.0);
        std::vector<Tensor> in = {x, w};
        if (bias) in.push_back(b);
        const Tensor y = run_node(node_of(c, bias), in).at(0);
        ASSERT_EQ(y.shape(), c.want);
        const std::vector<double> ref = reference(c, x, w, bias ? &b : nullptr);
        double err = 0;
        for (int64_t i = 0; i < y.numel(); ++i) err = std::max(err, std::abs(y.item_as_double(i) - ref[size_t(i)]));
        // |ref| <= 1 + taps (at most 2*2*3*3 = 36 here): 1e-5 is float32's rounding over such sums.
        EXPECT_LE(err, dt == DType::Float64 ? 1e-12 : 1e-5);
      }
}

TEST(ConvTranspose, BadWeightAndAttributesAreNamed) {
  Tensor x = random_real(DType::Float32, {1, 3, 4, 4}, 1, -1.0, 1.0);
  Case c{"bad", {1, 3, 4, 4}, {4, 2, 3, 3}};
  expect_error<ShapeError>(
      [&] {
        run_node(node_of(c, false), {x, random_real(DType::Float32, c.w, 2, -1.0, 1.0)});
      },
      {"input float[1, 3, 4, 4] has 3 channels but weight float[4, 2, 3, 3] expects "
       "4 (group 1",
       "node 'deconv' (ConvTranspose)"});
  Case bad_pad{"bad output_padding", {1, 3, 4, 4}, {3, 2, 3, 3}, 1, {}, {}, {}, {1}};
  EXPECT_THROW(run_node(node_of(bad_pad, false), {x, random_real(DType::Float32, bad_pad.w, 2, -1.0, 1.0)}),
               InvalidModel);
  Case bad_bias{"bad bias", {1, 3, 4, 4}, {3, 2, 3, 3}};
  EXPECT_THROW(run_node(node_of(bad_bias, true), {x, random_real(DType::Float32, bad_bias.w, 2, -1.0, 1.0),
                                                  random_real(DType::Float32, {3}, 3, -1.0, 1.0)}),
               ShapeError);
}

}  // namespace
}  // namespace kiln

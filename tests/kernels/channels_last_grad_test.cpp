// The layout pass's training kernels against the standard ones on the same data permuted:
// ai.kiln.ConvGradChannelsLast (dX, dW, dB; strides, pads, dilations, groups, depthwise, a
// channels-first input, dB alone), BatchNormalizationChannelsLast in training mode (Y and the
// running statistics) and BatchNormalizationGradChannelsLast (training, with the running
// statistics' gradients, and inference), MaxPoolGradChannelsLast / AveragePoolGradChannelsLast
// (channel counts over one block of 64), GlobalAveragePoolGrad in both layouts; the channels-last
// sums do not depend on the thread count. Float32: within 1e-5 of the standard kernel (2e-4 for
// the convolution's sums over the batch, oneDNN's other kernels).
#include <gtest/gtest.h>
#include <omp.h>

#include "kernels/channels_last_util.h"
#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

TEST(ConvGradChannelsLast, MatchesConvGradOnPermutedData) {
  using A = Attribute;
  const std::vector<ConvCase> cases = {
      {"3x3 pad 1", {2, 16, 9, 7}, {32, 16, 3, 3}, {{"pads", A::of_ints({1, 1, 1, 1})}}},
      {"strided, asymmetric pads",
       {2, 6, 11, 10},
       {5, 6, 3, 2},
       {{"strides", A::of_ints({2, 3})}, {"pads", A::of_ints({0, 1, 2, 0})}}},
      {"dilated", {1, 8, 12, 12}, {8, 8, 3, 3}, {{"dilations", A::of_ints({2, 2})}}},
      {"grouped", {2, 8, 6, 6}, {12, 2, 3, 3}, {{"group", A::of_int(4)}, {"pads", A::of_ints({1, 1, 1, 1})}}},
      {"depthwise", {2, 16, 7, 7}, {16, 1, 3, 3}, {{"group", A::of_int(16)}, {"pads", A::of_ints({1, 1, 1, 1})}}},
      {"1x1 stride 2", {2, 16, 8, 8}, {32, 16, 1, 1}, {{"strides", A::of_ints({2, 2})}}},
      {"three input channels",
       {2, 3, 16, 16},
       {8, 3, 7, 7},
       {{"strides", A::of_ints({2, 2})}, {"pads", A::of_ints({3, 3, 3, 3})}}},
      {"3x3 over 2x2", {4, 16, 2, 2}, {16, 16, 3, 3}, {{"pads", A::of_ints({1, 1, 1, 1})}}},
  };
  uint32_t seed = 300;
  for (const ConvCase& c : cases) {
    const Tensor x = random_f32(c.x, seed++, -1.f, 1.f);
    const Tensor w = random_f32(c.w, seed++, -1.f, 1.f);
    const Shape y = run1(make_node("Conv", 2, c.attrs), {x, w}).shape();
    const Tensor dy = random_f32(y, seed++, -1.f, 1.f);
    const Node grad = kiln_node(make_node("ConvGrad", 3, c.attrs, 3), "ConvGrad");
    const std::vector<Tensor> want = run_node(grad, {dy, x, w});
    Node cl = kiln_node(grad, "ConvGradChannelsLast");
    std::vector<Tensor> got = run_node(cl, {to_nhwc(dy), to_nhwc(x), w});
    expect_near(to_nchw(got[0]), want[0], 2e-4, c.name + ": dX");
    expect_near(got[1], want[1], 2e-4, c.name + ": dW");
    expect_near(got[2], want[2], 2e-4, c.name + ": dB");
    cl.attrs["input_channels_last"] = Attribute::of_int(0);  // a first layer: X and dX channels first
    got = run_node(cl, {to_nhwc(dy), x, w});
    expect_near(got[0], want[0], 2e-4, c.name + ": dX of a channels-first X");
    expect_near(got[1], want[1], 2e-4, c.name + ": dW of a channels-first X");
    cl.attrs["input_channels_last"] = Attribute::of_int(1);
    cl.attrs["output_mask"] = Attribute::of_ints({0, 0, 1});  // dB alone: summed over the rows
    got = run_node(cl, {to_nhwc(dy), to_nhwc(x), w});
    expect_near(got[2], want[2], 2e-4, c.name + ": dB alone");
  }
}

Tensor to_f64(const Tensor& t) {
  Tensor out = Tensor::empty(DType::Float64, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) out.data<double>()[i] = t.data<float>()[i];
  return out;
}
Tensor to_f32(const Tensor& t) {
  Tensor out = Tensor::empty(DType::Float32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) out.data<float>()[i] = float(t.data<double>()[i]);
  return out;
}

// One output position whose cropped window is the whole input: ConvGrad runs it as matrix
// products (float32), checked against ConvGrad's float64 direct loops, in both layouts.
TEST(ConvGradChannelsLast, OneProductMatchesTheFloat64Loops) {
  using A = Attribute;
  const std::vector<ConvCase> cases = {
      {"3x3 over 1x1", {4, 16, 1, 1}, {8, 16, 3, 3}, {{"pads", A::of_ints({1, 1, 1, 1})}}},
      {"3x3 stride 2 over 2x2",
       {3, 8, 2, 2},
       {16, 8, 3, 3},
       {{"strides", A::of_ints({2, 2})}, {"pads", A::of_ints({1, 1, 1, 1})}}},
      {"2x2 over 2x2, no padding", {2, 5, 2, 2}, {6, 5, 2, 2}, {}},
  };
  uint32_t seed = 350;
  for (const ConvCase& c : cases) {
    const Tensor x = random_f32(c.x, seed++, -1.f, 1.f);
    const Tensor w = random_f32(c.w, seed++, -1.f, 1.f);
    const Shape y = run1(make_node("Conv", 2, c.attrs), {x, w}).shape();
    const Tensor dy = random_f32(y, seed++, -1.f, 1.f);
    const Node grad = kiln_node(make_node("ConvGrad", 3, c.attrs, 3), "ConvGrad");
    const std::vector<Tensor> want = run_node(grad, {to_f64(dy), to_f64(x), to_f64(w)});
    const std::vector<Tensor> got = run_node(grad, {dy, x, w});
    const std::vector<Tensor> cl = run_node(kiln_node(grad, "ConvGradChannelsLast"), {to_nhwc(dy), to_nhwc(x), w});
    for (size_t i = 0; i < 3; ++i) {
      const std::string what = c.name + ": output " + std::to_string(i);
      expect_near(got[i], to_f32(want[i]), 1e-5, what);
      expect_near(i == 0 ? to_nchw(cl[i]) : cl[i], to_f32(want[i]), 1e-5, what + ", channels last");
    }
  }
}

std::vector<Tensor> bn_params(int64_t c, uint32_t seed) {
  return {random_f32({c}, seed, 0.5f, 2.f), random_f32({c}, seed + 1, -1.f, 1.f), random_f32({c}, seed + 2, -1.f, 1.f),
          random_f32({c}, seed + 3, 0.1f, 2.f)};
}

// Shapes of one and of many row blocks (norm_layout.h: 32 rows at least).
const std::vector<Shape> kMaps = {{2, 6, 5, 7}, {4, 20, 30, 30}, {1, 70, 3, 3}};

TEST(BatchNormChannelsLast, TrainingMatchesBatchNormalization) {
  uint32_t seed = 400;
  for (const Shape& s : kMaps) {
    const Tensor x = random_f32(s, seed++, -3.f, 3.f);
    std::vector<Tensor> in{x};
    for (const Tensor& p : bn_params(s[1], seed)) in.push_back(p);
    seed += 4;
    const Node bn = make_node("BatchNormalization", 5,
                              {{"epsilon", Attribute::of_float(1e-3f)},
                               {"momentum", Attribute::of_float(0.8f)},
                               {"training_mode", Attribute::of_int(1)}},
                              3);
    const std::vector<Tensor> want = run_node(bn, in, 15);
    in[0] = to_nhwc(x);
    const std::string what = to_string(s);
    const std::vector<Tensor> got = run_node(kiln_node(bn, "BatchNormalizationChannelsLast"), in);
    expect_near(to_nchw(got[0]), want[0], 1e-5, what + ": Y");
    expect_near(got[1], want[1], 1e-5, what + ": running_mean");
    expect_near(got[2], want[2], 1e-5, what + ": running_var");
  }
}

TEST(BatchNormChannelsLast, GradMatchesBatchNormalizationGrad) {
  uint32_t seed = 500;
  for (const Shape& s : kMaps) {
    const Tensor x = random_f32(s, seed++, -3.f, 3.f), dy = random_f32(s, seed++, -1.f, 1.f);
    const std::vector<Tensor> p = bn_params(s[1], seed);
    seed += 4;
    const Tensor drm = random_f32({s[1]}, seed++, -1.f, 1.f), drv = random_f32({s[1]}, seed++, -1.f, 1.f);
    const std::map<std::string, Attribute> attrs{{"epsilon", Attribute::of_float(1e-3f)},
                                                 {"momentum", Attribute::of_float(0.8f)}};
    struct Form {
      std::string name;
      std::vector<Tensor> rest;  // after dY and X
      int64_t training;
    };
    const Tensor none;
    const std::vector<Form> forms = {
        {"training", {p[0]}, 1},
        {"training with the running statistics' gradients", {p[0], none, none, drm, drv}, 1},
        {"inference", {p[0], p[2], p[3]}, 0},
    };
    for (const Form& f : forms) {
      auto a = attrs;
      a["training_mode"] = Attribute::of_int(f.training);
      const Node grad =
          kiln_node(make_node("BatchNormalizationGrad", 2 + f.rest.size(), a, 3), "BatchNormalizationGrad");
      std::vector<Tensor> in{dy, x};
      in.insert(in.end(), f.rest.begin(), f.rest.end());
      const std::vector<Tensor> want = run_node(grad, in);
      in[0] = to_nhwc(dy);
      in[1] = to_nhwc(x);
      const std::vector<Tensor> got = run_node(kiln_node(grad, "BatchNormalizationGradChannelsLast"), in);
      const std::string what = to_string(s) + ", " + f.name;
      expect_near(to_nchw(got[0]), want[0], 1e-5, what + ": dX");
      expect_near(got[1], want[1], 1e-4, what + ": dScale");
      expect_near(got[2], want[2], 1e-4, what + ": dB");
    }
  }
}

TEST(BatchNormChannelsLast, SumsDoNotDependOnTheThreadCount) {
  const Shape s{4, 20, 30, 30};
  const Tensor x = to_nhwc(random_f32(s, 600, -3.f, 3.f)), dy = to_nhwc(random_f32(s, 601, -1.f, 1.f));
  const std::vector<Tensor> p = bn_params(s[1], 602);
  const Node bn = kiln_node(make_node("BatchNormalization", 5, {{"training_mode", Attribute::of_int(1)}}, 3),
                            "BatchNormalizationChannelsLast");
  const Node grad = kiln_node(make_node("BatchNormalizationGrad", 3, {}, 3), "BatchNormalizationGradChannelsLast");
  const int threads = omp_get_max_threads();
  std::vector<std::vector<Tensor>> runs;
  for (int t : {1, 2, 3}) {
    omp_set_num_threads(t);
    std::vector<Tensor> out = run_node(bn, {x, p[0], p[1], p[2], p[3]});
    for (const Tensor& g : run_node(grad, {dy, x, p[0]})) out.push_back(g);
    runs.push_back(out);
  }
  omp_set_num_threads(threads);
  for (size_t r = 1; r < runs.size(); ++r)
    for (size_t i = 0; i < runs[0].size(); ++i) expect_bytes_equal(runs[r][i], runs[0][i]);
}

TEST(PoolGradChannelsLast, MatchesThePoolGradientsOnPermutedData) {
  uint32_t seed = 700;
  for (const Shape& s : {Shape{2, 16, 9, 11}, Shape{2, 70, 6, 5}}) {  // 70: a block of 64 and a part
    for (const auto& [op, attrs] : pool_cases()) {
      const Tensor x = random_f32(s, seed++, -3.f, 3.f);  // continuous values: no tied maxima
      const Tensor dy = random_f32(run1(make_node(op, 1, attrs), {x}).shape(), seed++, -1.f, 1.f);
      const Node grad = kiln_node(make_node(op + "Grad", 2, attrs), op + "Grad");
      const Tensor want = run1(grad, {dy, x});
      const Tensor got = run1(kiln_node(grad, op + "GradChannelsLast"), {to_nhwc(dy), to_nhwc(x)});
      expect_near(to_nchw(got), want, 1e-5, op + " " + to_string(s));
    }
  }
}

TEST(GlobalAveragePoolGrad, SpreadsTheGradientInBothLayouts) {
  for (const Shape& s : {Shape{2, 3, 4, 5}, Shape{3, 70, 1, 1}, Shape{2, 3, 7}}) {
    const Tensor x = random_f32(s, 800, -1.f, 1.f);
    Shape y(s.size(), 1);
    y[0] = s[0];
    y[1] = s[1];
    const Tensor dy = random_f32(y, 801, -1.f, 1.f);
    const Node grad = kiln_node(make_node("GlobalAveragePoolGrad", 2), "GlobalAveragePoolGrad");
    const Tensor got = run1(grad, {dy, x});
    const int64_t plane = numel(s) / (s[0] * s[1]);
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_FLOAT_EQ(got.data<float>()[i], dy.data<float>()[i / plane] / float(plane)) << to_string(s) << " at " << i;
    if (s.size() != 4) continue;
    const Tensor cl = run1(kiln_node(grad, "GlobalAveragePoolGradChannelsLast"), {dy, to_nhwc(x)});
    expect_near(to_nchw(cl), got, 0, to_string(s) + " channels last");
  }
}

TEST(ChannelsLastGradients, BadInputsAreErrorsNamingThem) {
  const Node conv = kiln_node(make_node("ConvGrad", 3, {}, 3), "ConvGradChannelsLast");
  expect_error<ShapeError>(
      [&] {
        run_node(conv, {random_f32({1, 3, 2}, 1, 0.f, 1.f), random_f32({1, 5, 4}, 2, 0.f, 1.f),
                        random_f32({2, 4, 3}, 3, 0.f, 1.f)});
      },
      {"ConvGradChannelsLast", "rank 4", "float[1, 5, 4]"});
  const Node pool =
      kiln_node(make_node("MaxPoolGrad", 2, {{"kernel_shape", Attribute::of_ints({2, 2})}}), "MaxPoolGradChannelsLast");
  expect_error<ShapeError>(
      [&] {
        run1(pool, {random_f32({1, 2, 3}, 1, 0.f, 1.f), random_f32({1, 4, 3}, 2, 0.f, 1.f)});
      },
      {"MaxPoolGradChannelsLast", "[N, H, W, C]"});
  const Node bn = kiln_node(make_node("BatchNormalizationGrad", 3, {}, 3), "BatchNormalizationGradChannelsLast");
  expect_error<ShapeError>(
      [&] {
        run_node(
            bn, {random_f32({2, 4, 3}, 1, 0.f, 1.f), random_f32({2, 4, 3}, 2, 0.f, 1.f), random_f32({3}, 3, 0.f, 1.f)});
      },
      {"BatchNormalizationGradChannelsLast", "rank 4"});
  // The channel is the last axis: 5 channels, a scale of 4.
  expect_error<ShapeError>(
      [&] {
        run_node(bn, {random_f32({2, 4, 3, 5}, 1, 0.f, 1.f), random_f32({2, 4, 3, 5}, 2, 0.f, 1.f),
                      random_f32({4}, 3, 0.f, 1.f)});
      },
      {"float[4]", "[5]"});
  const Node gap = kiln_node(make_node("GlobalAveragePoolGrad", 2), "GlobalAveragePoolGradChannelsLast");
  expect_error<ShapeError>(
      [&] {
        run1(gap, {random_f32({2, 4, 1, 1}, 1, 0.f, 1.f), random_f32({2, 3, 3, 5}, 2, 0.f, 1.f)});
      },
      {"dY float[2, 4, 1, 1]", "[2, 5, 1, 1]"});
}

}  // namespace
}  // namespace kiln

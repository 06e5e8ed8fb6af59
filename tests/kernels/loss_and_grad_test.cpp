// ai.kiln.SoftmaxCrossEntropyLossAndGrad against the two kernels it fuses: SoftmaxCrossEntropyLoss
// and ai.kiln.SoftmaxCrossEntropyLossGrad from the scores. dScores and dWeights are the gradient
// kernel's bit for bit (the same pass); the loss is the forward's within 1e-6 (|loss| + 1) in
// float32 (the gradient's float exponentials, within 2 ulp, against the forward's in double) and
// 1e-12 (|loss| + 1) in float64: (N, C) rows of 8192 classes (the vectorised path) and (N, C, d1, d2), every reduction,
// weights, ignore_index, and a mean over nothing counted (NaN, as the forward's).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;

Node sce_node(const std::string& op, bool weights, const std::string& reduction, std::optional<int64_t> ignore,
              size_t outputs) {
  Node n;
  n.name = "loss";
  n.op_type = op;
  const bool forward = op == "SoftmaxCrossEntropyLoss";
  if (!forward) n.domain = kKilnDomain;
  n.inputs = forward ? std::vector<std::string>{"X", "T"} : std::vector<std::string>{"dY", "X", "T"};
  if (weights) n.inputs.push_back("W");
  for (size_t i = 0; i < outputs; ++i) n.outputs.push_back("out" + std::to_string(i));
  n.attrs["reduction"] = Attribute::of_string(reduction);
  if (ignore) n.attrs["ignore_index"] = Attribute::of_int(*ignore);
  if (op == "SoftmaxCrossEntropyLossGrad") n.attrs["x_is_log_prob"] = Attribute::of_int(0);
  return n;
}

Tensor labels(const Shape& shape, int64_t c, std::optional<int64_t> ignore, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> d(0, c - 1);
  Tensor t = Tensor::empty(DType::Int64, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = ignore && i % 3 == 1 ? *ignore : d(gen);
  return t;
}

// Within tol * (|want| + 1).
void expect_loss_near(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = as_doubles(got), w = as_doubles(want);
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " at " << i;
      continue;
    }
    ASSERT_NEAR(g[i], w[i], tol * (std::fabs(w[i]) + 1.0)) << what << " at " << i;
  }
}

void check_case(DType dt, const Shape& xs, const std::string& red, bool weighted, std::optional<int64_t> ignore,
                uint32_t seed) {
  const std::string what = fmt::format("{} {} {} weighted {} ignore {}", dtype_name(dt), to_string(xs), red, weighted,
                                       ignore ? std::to_string(*ignore) : "none");
  const Tensor x = random_real(dt, xs, seed, -4.0, 4.0);
  Shape ts{xs[0]};
  ts.insert(ts.end(), xs.begin() + 2, xs.end());
  const Tensor t = labels(ts, xs[1], ignore, seed + 1);
  Tensor w = random_real(dt, {xs[1]}, seed + 2, 0.1, 2.0);
  const Tensor dy = red == "none" ? random_real(dt, ts, seed + 3, -1.0, 1.0) : random_real(dt, {}, seed + 3, 0.5, 2.0);
  std::vector<Tensor> forward_in{x, t}, grad_in{dy, x, t};
  if (weighted) {
    forward_in.push_back(w);
    grad_in.push_back(w);
  }
  const size_t grads = weighted ? 2 : 1;
  const Tensor loss = run_node(sce_node("SoftmaxCrossEntropyLoss", weighted, red, ignore, 1), forward_in, 17).at(0);
  const auto want = run_node(sce_node("SoftmaxCrossEntropyLossGrad", weighted, red, ignore, grads), grad_in, 17);
  const auto got = run_node(sce_node("SoftmaxCrossEntropyLossAndGrad", weighted, red, ignore, grads + 1), grad_in, 17);
  ASSERT_EQ(got.size(), grads + 1) << what;
  expect_bytes_equal(got[0], want[0]);
  if (weighted) expect_bytes_equal(got[2], want[1]);
  expect_loss_near(got[1], loss, dt == DType::Float32 ? 1e-6 : 1e-12, what);
}

TEST(SoftmaxCrossEntropyLossAndGrad, IsTheLossAndItsGradientInOnePass) {
  uint32_t seed = 10;
  for (DType dt : {DType::Float32, DType::Float64})
    for (const Shape& xs : {Shape{6, 8192}, Shape{3, 5, 2, 4}, Shape{4, 7}})
      for (const std::string red : {"none", "sum", "mean"})
        for (bool weighted : {false, true})
          for (std::optional<int64_t> ignore : {std::optional<int64_t>(), std::optional<int64_t>(-100)})
            check_case(dt, xs, red, weighted, ignore, seed += 4);
}

TEST(SoftmaxCrossEntropyLossAndGrad, AMeanOverNothingCountedIsNaNWithAZeroGradient) {
  const Tensor x = random_f32({2, 3}, 5, -1.f, 1.f);
  const Tensor t = Tensor::from_vector<int64_t>({2}, {7, 7});
  const auto out =
      run_node(sce_node("SoftmaxCrossEntropyLossAndGrad", false, "mean", 7, 2), {Tensor::scalar<float>(1.f), x, t}, 17);
  EXPECT_TRUE(std::isnan(out[1].data<float>()[0]));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(out[0].data<float>()[i], 0.f) << i;
}

TEST(SoftmaxCrossEntropyLossAndGrad, TheWeightsGradientNeedsTheWeights) {
  const Tensor x = random_f32({2, 3}, 5, -1.f, 1.f);
  const Tensor t = Tensor::from_vector<int64_t>({2}, {0, 2});
  kiln::test::expect_error<InvalidModel>(
      [&] {
        run_node(sce_node("SoftmaxCrossEntropyLossAndGrad", false, "mean", std::nullopt, 3),
                 {Tensor::scalar<float>(1.f), x, t}, 17);
      },
      "the weights' gradient (output 2) needs the weights (input 3)");
}

// With out_dtype (what fold_16_bit_casts writes for mixed precision's Cast of the scores' gradient)
// both gradient kernels write dScores rounded to bfloat16 or float16: exactly the float32 dScores
// then a Cast, the loss and the weights' gradient unchanged. Rows of 8192 classes and of 7, every
// reduction, weights, ignore_index. Only float32 scores [N, C], not log-probabilities, take it.
TEST(SoftmaxCrossEntropyLossAndGrad, OutDtypeRoundsTheScoresGradientAsACastWould) {
  uint32_t seed = 300;
  for (const DType low : {DType::BFloat16, DType::Float16})
    for (const Shape& xs : {Shape{6, 8192}, Shape{4, 7}})
      for (const std::string red : {"none", "mean"})
        for (bool weighted : {false, true}) {
          SCOPED_TRACE(fmt::format("{} {} {} weighted {}", dtype_name(low), to_string(xs), red, weighted));
          const Tensor x = random_real(DType::Float32, xs, seed += 4, -4.0, 4.0);
          const Tensor t = labels({xs[0]}, xs[1], -100, seed + 1);
          const Tensor w = random_real(DType::Float32, {xs[1]}, seed + 2, 0.1, 2.0);
          const Tensor dy = red == "none" ? random_real(DType::Float32, {xs[0]}, seed + 3, -1.0, 1.0)
                                          : random_real(DType::Float32, {}, seed + 3, 0.5, 2.0);
          std::vector<Tensor> in{dy, x, t};
          if (weighted) in.push_back(w);
          for (const char* op : {"SoftmaxCrossEntropyLossAndGrad", "SoftmaxCrossEntropyLossGrad"}) {
            const size_t outputs = (std::string(op) == "SoftmaxCrossEntropyLossGrad" ? 1 : 2) + (weighted ? 1 : 0);
            Node plain = sce_node(op, weighted, red, -100, outputs), rounded = plain;
            rounded.attrs["out_dtype"] = Attribute::of_int(dtype_to_onnx(low));
            const auto want = run_node(plain, in, 17), got = run_node(rounded, in, 17);
            ASSERT_EQ(got.size(), want.size()) << op;
            expect_bytes_equal(got[0], cast_to(want[0], low));
            for (size_t o = 1; o < got.size(); ++o) expect_bytes_equal(got[o], want[o]);
          }
        }
  Node log_prob = sce_node("SoftmaxCrossEntropyLossGrad", false, "mean", std::nullopt, 1);
  log_prob.attrs["x_is_log_prob"] = Attribute::of_int(1);
  log_prob.attrs["out_dtype"] = Attribute::of_int(dtype_to_onnx(DType::BFloat16));
  const std::vector<Tensor> in{Tensor::scalar<float>(1.f), random_f32({2, 3}, 5, -1.f, 1.f),
                               Tensor::from_vector<int64_t>({2}, {0, 2})};
  kiln::test::expect_error<InvalidModel>([&] { run_node(log_prob, in, 17); },
                                         "out_dtype bfloat16 needs float32 scores [N, C] (not log-probabilities)");
  Node spatial = sce_node("SoftmaxCrossEntropyLossAndGrad", false, "mean", std::nullopt, 2);
  spatial.attrs["out_dtype"] = Attribute::of_int(dtype_to_onnx(DType::BFloat16));
  kiln::test::expect_error<InvalidModel>(
      [&] {
        run_node(spatial,
                 {Tensor::scalar<float>(1.f), random_f32({2, 3, 4}, 5, -1.f, 1.f), Tensor::zeros(DType::Int64, {2, 4})},
                 17);
      },
      "got float[2, 3, 4]");
  spatial.attrs["out_dtype"] = Attribute::of_int(1);
  kiln::test::expect_error<InvalidModel>([&] { run_node(spatial, in, 17); },
                                         "attribute out_dtype is 1; it must be bfloat16 (16) or float16 (10)");
}

}  // namespace
}  // namespace kiln

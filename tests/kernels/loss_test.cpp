// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss through run_node against ONNX's definition
// evaluated in double here: (N, C) and (N, C, d1, d2) inputs, every reduction, weights, ignore_index
// (mean divides by the weight of the counted targets), the log_prob output, and rejected inputs.
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

Node loss_node(const std::string& op, bool weights, const std::string& reduction, std::optional<int64_t> ignore,
               bool log_prob = false) {
  Node n;
  n.name = "loss";
  n.op_type = op;
  n.inputs = {"X", "T"};
  if (weights) n.inputs.push_back("W");
  n.outputs = {"L"};
  if (log_prob) n.outputs.push_back("LP");
  n.attrs["reduction"] = Attribute::of_string(reduction);
  if (ignore) n.attrs["ignore_index"] = Attribute::of_int(*ignore);
  return n;
}

// Targets in [0, C), with every third one set to `ignore` when given.
Tensor targets(const Shape& shape, int64_t c, std::optional<int64_t> ignore, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> d(0, c - 1);
  Tensor t = Tensor::empty(DType::Int64, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = ignore && i % 3 == 1 ? *ignore : d(gen);
  return t;
}

struct Ref {
  std::vector<double> loss;      // reduced per the reduction (one value unless "none")
  std::vector<double> log_prob;  // SCE only
};

// ONNX's definition, straight from the spec, in double.
Ref reference(bool softmax, const Tensor& x, const Tensor& t, const Tensor* w, const std::string& reduction,
              std::optional<int64_t> ignore) {
  const int64_t n = x.shape()[0], c = x.shape()[1], d = x.numel() / (n * c);
  std::vector<double> lp(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) lp[static_cast<size_t>(i)] = x.data<float>()[i];
  if (softmax)
    for (int64_t a = 0; a < n; ++a)
      for (int64_t b = 0; b < d; ++b) {
        double s = 0;
        for (int64_t k = 0; k < c; ++k) s += std::exp(lp[static_cast<size_t>((a * c + k) * d + b)]);
        for (int64_t k = 0; k < c; ++k) lp[static_cast<size_t>((a * c + k) * d + b)] -= std::log(s);
      }
  std::vector<double> l(static_cast<size_t>(n * d)), wt(static_cast<size_t>(n * d));
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = 0; b < d; ++b) {
      const int64_t tv = t.data<int64_t>()[a * d + b];
      const size_t i = static_cast<size_t>(a * d + b);
      if (ignore && tv == *ignore) continue;
      wt[i] = w ? w->data<float>()[tv] : 1.0;
      l[i] = -wt[i] * lp[static_cast<size_t>((a * c + tv) * d + b)];
    }
  Ref r{l, softmax ? lp : std::vector<double>{}};
  if (reduction != "none") {
    double s = 0, ws = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      s += l[i];
      ws += wt[i];
    }
    r.loss = {reduction == "sum" ? s : s / ws};
  }
  return r;
}

TEST(Loss, BothOpsAllReductionsWeightsAndIgnoreIndex) {
  for (const Shape& xs : {Shape{6, 5}, Shape{3, 4, 2, 5}})
    for (const std::string op : {"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"})
      for (const std::string red : {"none", "sum", "mean"})
        for (bool weighted : {false, true})
          for (std::optional<int64_t> ignore :
               {std::optional<int64_t>(), std::optional<int64_t>(2), std::optional<int64_t>(-1)}) {
            const bool sce = op == "SoftmaxCrossEntropyLoss";
            const Tensor x = random_f32(xs, 1, -3.f, 3.f);
            Shape ts{xs[0]};
            ts.insert(ts.end(), xs.begin() + 2, xs.end());
            const Tensor t = targets(ts, xs[1], ignore, 2);
            Tensor w = random_f32({xs[1]}, 3, -3.f, 3.f);
            for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = std::fabs(w.data<float>()[i]) + 0.1f;
            std::vector<Tensor> in = {x, t};
            if (weighted) in.push_back(w);
            const auto out = run_node(loss_node(op, weighted, red, ignore, sce), in, 13);
            const Ref want = reference(sce, x, t, weighted ? &w : nullptr, red, ignore);
            ASSERT_EQ(out[0].shape(), red == "none" ? ts : Shape{}) << op << " " << red;
            for (size_t i = 0; i < want.loss.size(); ++i)
              ASSERT_NEAR(out[0].data<float>()[i], want.loss[i], 1e-6 * std::fabs(want.loss[i]) + 1e-6)
                  << op << " " << to_string(xs) << " " << red << " weighted " << weighted << " ignore "
                  << ignore.value_or(99);
            if (sce) {
              ASSERT_EQ(out[1].shape(), xs);
              for (size_t i = 0; i < want.log_prob.size(); ++i)
                ASSERT_NEAR(out[1].data<float>()[i], want.log_prob[i], 1e-6 * std::fabs(want.log_prob[i]) + 1e-6);
            }
          }
}

TEST(Loss, SoftmaxIsStableAndAllIgnoredMeanIsNaN) {
  const Tensor x = Tensor::from_vector<float>({2, 3}, {1000.f, 0.f, -1000.f, -500.f, -500.f, -500.f});
  const Tensor t = Tensor::from_vector<int64_t>({2}, {1, 2});
  const auto out = run_node(loss_node("SoftmaxCrossEntropyLoss", false, "none", std::nullopt, true), {x, t}, 13);
  EXPECT_NEAR(out[0].data<float>()[0], 1000.0, 1e-3);
  EXPECT_NEAR(out[0].data<float>()[1], std::log(3.0), 1e-6);
  EXPECT_EQ(out[1].data<float>()[0], 0.f);
  const Tensor ignored = Tensor::from_vector<int64_t>({2}, {7, 7});
  const Tensor m = run_node(loss_node("NegativeLogLikelihoodLoss", false, "mean", 7), {x, ignored}, 13).at(0);
  EXPECT_TRUE(std::isnan(m.data<float>()[0]));  // 0 / 0, as ONNX's reference
  // int32 targets and double inputs.
  const Tensor xd = Tensor::from_vector<double>({1, 2}, {-0.25, -1.5});
  const Tensor y = run_node(loss_node("NegativeLogLikelihoodLoss", false, "sum", std::nullopt),
                            {xd, Tensor::from_vector<int32_t>({1}, {1})}, 13)
                       .at(0);
  EXPECT_EQ(y.data<double>()[0], 1.5);
}

TEST(Loss, RejectsBadTargetsShapesAndAttributes) {
  const Tensor x = Tensor::zeros(DType::Float32, {2, 3, 4});
  const Node nll = loss_node("NegativeLogLikelihoodLoss", false, "mean", -100);
  expect_error<InvalidArgument>(
      [&] {
        run_node(nll, {x, Tensor::from_vector<int64_t>({2, 4}, {0, 1, 2, 3, 0, 0, 0, 0})}, 13);
      },
      "target 'T' has value 3 at element 3, outside the classes [0, 3) (ignore_index is -100)");
  expect_error<ShapeError>(
      [&] {
        run_node(nll, {x, Tensor::zeros(DType::Int64, {2, 3})}, 13);
      },
      "target 'T' has shape [2, 3] but input [2, 3, 4] needs target [2, 4]");
  expect_error<ShapeError>(
      [&] {
        run_node(loss_node("SoftmaxCrossEntropyLoss", true, "sum", std::nullopt),
                 {x, Tensor::zeros(DType::Int64, {2, 4}), Tensor::zeros(DType::Float32, {4})}, 13);
      },
      "weights 'W' has shape [4]; it must be [C] = [3]");
  expect_error<TypeError>(
      [&] {
        run_node(nll, {x, Tensor::zeros(DType::Float32, {2, 4})}, 13);
      },
      "target 'T' is float; it must be int32 or int64");
  expect_error<InvalidModel>(
      [&] {
        run_node(loss_node("SoftmaxCrossEntropyLoss", false, "avg", std::nullopt),
                 {x, Tensor::zeros(DType::Int64, {2, 4})}, 13);
      },
      "reduction is 'avg'");
  EXPECT_THROW(run_node(nll, {Tensor::zeros(DType::Float32, {3}), Tensor::zeros(DType::Int64, {3})}, 13), ShapeError);
  EXPECT_THROW(run_node(nll, {Tensor::zeros(DType::Int32, {2, 3}), Tensor::zeros(DType::Int64, {2})}, 13), Unsupported);
}

}  // namespace
}  // namespace kiln

// BatchNormalization in training mode: batch statistics against a hand computation and against
// PyTorch's train-mode BatchNorm1d (outputs and running statistics dumped from torch 1.13), whose
// conventions Kiln follows: ONNX momentum = 1 - PyTorch momentum, running_var updated with the
// UNBIASED batch variance (ONNX's reference uses the biased one), Y normalised with the biased one.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kernel.h"

namespace kiln {
namespace {

Node bn_training(float momentum, std::vector<std::string> outputs = {"y", "running_mean", "running_var"}) {
  Node n;
  n.name = "bn";
  n.op_type = "BatchNormalization";
  n.inputs = {"x", "scale", "b", "mean", "var"};
  n.outputs = std::move(outputs);
  n.attrs = {{"training_mode", Attribute::of_int(1)},
             {"momentum", Attribute::of_float(momentum)},
             {"epsilon", Attribute::of_float(1e-5f)}};
  return n;
}

// x: [N=2, C=2, 3]; scale, B, running statistics as in the PyTorch dump below.
const Tensor kX = Tensor::from_vector<float>({2, 2, 3}, {1, 2, 4, 0.5f, -1, 3, -2, 0, 1, 2, 2.5f, -0.5f});
const Tensor kScale = Tensor::from_vector<float>({2}, {1.5f, -0.5f});
const Tensor kB = Tensor::from_vector<float>({2}, {0.25f, 1.0f});
const Tensor kMean = Tensor::from_vector<float>({2}, {0.2f, -0.3f});
const Tensor kVar = Tensor::from_vector<float>({2}, {1.1f, 0.9f});

TEST(BatchNormTraining, MatchesPyTorchTrainModeBatchNorm) {
  // torch.nn.BatchNorm1d(2, momentum=0.1, eps=1e-5) in train mode on the tensors above.
  const std::vector<double> y_torch = {0.25,
                                       1.071582555770874,
                                       2.714747905731201,
                                       1.1929608583450317,
                                       1.689145803451538,
                                       0.3659859299659729,
                                       -2.214747905731201,
                                       -0.5715826153755188,
                                       0.25,
                                       0.6967759132385254,
                                       0.5313808917999268,
                                       1.523750901222229};
  const std::vector<double> mean_torch = {0.2800000011920929, -0.1616666615009308};
  const std::vector<double> var_torch = {1.3899999856948853, 1.0841666460037231};
  for (int opset : {14, 15}) {
    const auto out = run_node(bn_training(0.9f), {kX, kScale, kB, kMean, kVar}, opset);  // ONNX 0.9 = torch 0.1
    ASSERT_EQ(out.size(), 3u);
    for (int64_t i = 0; i < 12; ++i) EXPECT_NEAR(out[0].item_as_double(i), y_torch[size_t(i)], 2e-6) << i;
    for (int64_t c = 0; c < 2; ++c) {
      EXPECT_NEAR(out[1].item_as_double(c), mean_torch[size_t(c)], 1e-6) << c;
      EXPECT_NEAR(out[2].item_as_double(c), var_torch[size_t(c)], 1e-6) << c;
    }
  }
}

TEST(BatchNormTraining, HandComputedStatisticsFloat64AndSpatialRanks) {
  // Channel 0 holds {1, 2, 4, -2, 0, 1}: mean 1, squared deviations 20, biased var 20/6, unbiased 4.
  Tensor x = Tensor::empty(DType::Float64, {2, 2, 3});
  for (int64_t i = 0; i < 12; ++i) x.data<double>()[i] = kX.item_as_double(i);
  auto f64 = [](const Tensor& t) {
    Tensor o = Tensor::empty(DType::Float64, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) o.data<double>()[i] = t.item_as_double(i);
    return o;
  };
  const double momentum = 0.75, eps = 1e-5;
  const auto out = run_node(bn_training(float(momentum)), {x, f64(kScale), f64(kB), f64(kMean), f64(kVar)}, 15);
  const double inv = 1.0 / std::sqrt(20.0 / 6.0 + eps);
  EXPECT_NEAR(out[0].data<double>()[2], 1.5 * (4.0 - 1.0) * inv + 0.25, 1e-12);
  EXPECT_NEAR(out[0].data<double>()[6], 1.5 * (-2.0 - 1.0) * inv + 0.25, 1e-12);
  EXPECT_NEAR(out[1].data<double>()[0], double(0.2f) * momentum + 1.0 * (1 - momentum), 1e-12);
  EXPECT_NEAR(out[2].data<double>()[0], double(1.1f) * momentum + 4.0 * (1 - momentum), 1e-12);

  // Rank 4: statistics over N, H, W; every channel of Y has mean B and variance scale^2 * var / (var + eps).
  Tensor x4 = Tensor::empty(DType::Float32, {3, 2, 2, 2});
  for (int64_t i = 0; i < x4.numel(); ++i) x4.data<float>()[i] = float(std::sin(double(i) * 1.7) * 3.0);
  const auto y4 = run_node(bn_training(0.9f, {"y"}), {x4, kScale, kB, kMean, kVar}, 15).at(0);
  for (int64_t c = 0; c < 2; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t i = 0; i < 4; ++i) sum += y4.item_as_double((n * 2 + c) * 4 + i);
    EXPECT_NEAR(sum / 12.0, kB.item_as_double(c), 1e-5);
  }
}

TEST(BatchNormTraining, ErrorsAreNamed) {
  // One value per channel has no batch variance (PyTorch refuses it too).
  EXPECT_THROW(run_node(bn_training(0.9f), {Tensor::zeros(DType::Float32, {1, 2}), kScale, kB, kMean, kVar}, 15),
               ShapeError);
  // training_mode exists from opset 14.
  EXPECT_THROW(run_node(bn_training(0.9f, {"y"}), {kX, kScale, kB, kMean, kVar}, 13), InvalidModel);
}

}  // namespace
}  // namespace kiln

// Finite-difference checks of the loss gradients (ai.kiln SoftmaxCrossEntropyLossGrad and
// NegativeLogLikelihoodLossGrad): every reduction, class weights (and their own gradient),
// ignore_index, N-D inputs, with and without SCE's log_prob output (whose gradient is checked too,
// since the checker's loss projects every float output).
#include <gtest/gtest.h>

#include "autodiff/rule_helpers.h"

namespace kiln::testing::indexing {
namespace {

TEST(LossGradients, SoftmaxCrossEntropyReductionsWeightsIgnoreIndex) {
  uint64_t seed = 140;
  const Tensor labels2d = ints({2, 0, 1, 2});
  const Tensor labels_nd = ints({0, 2, 1, 1, 2, 2, 0, 1}, {2, 2, 2});  // for scores [2, 3, 2, 2]
  for (const char* red : {"none", "sum", "mean"}) {
    const std::map<std::string, Attribute> plain{{"reduction", s(red)}};
    const std::map<std::string, Attribute> ignoring{{"reduction", s(red)}, {"ignore_index", i(1)}};
    for (size_t outs : {1, 2}) {
      both("SoftmaxCrossEntropyLoss", {random_tensor({4, 3}, ++seed, -2, 2), labels2d}, {0}, plain, seed, 17, outs);
      both("SoftmaxCrossEntropyLoss",
           {random_tensor({4, 3}, ++seed, -2, 2), labels2d, random_tensor({3}, ++seed, 0.2, 2)}, {0, 2}, ignoring, seed,
           17, outs);
      both("SoftmaxCrossEntropyLoss",
           {random_tensor({2, 3, 2, 2}, ++seed, -2, 2), labels_nd, random_tensor({3}, ++seed, 0.2, 2)}, {0, 2}, plain,
           seed, 17, outs);
      both("SoftmaxCrossEntropyLoss", {random_tensor({2, 3, 2, 2}, ++seed, -2, 2), labels_nd}, {0}, ignoring, seed, 17,
           outs);
    }
  }
}

TEST(LossGradients, NegativeLogLikelihoodReductionsWeightsIgnoreIndex) {
  uint64_t seed = 180;
  const Tensor target = ints({2, 0, -1, 2, 1});
  const Tensor target_nd = ints({0, 2, 1, -1, 2, 2, 0, 1}, {2, 2, 2});
  for (const char* red : {"none", "sum", "mean"}) {
    const std::map<std::string, Attribute> attrs{{"reduction", s(red)}, {"ignore_index", i(-1)}};
    both("NegativeLogLikelihoodLoss", {random_tensor({5, 3}, ++seed), target, random_tensor({3}, ++seed, 0.2, 2)},
         {0, 2}, attrs, seed);
    both("NegativeLogLikelihoodLoss", {random_tensor({2, 3, 2, 2}, ++seed), target_nd}, {0}, attrs, seed);
    both("NegativeLogLikelihoodLoss",
         {random_tensor({2, 3, 2, 2}, ++seed), target_nd, random_tensor({3}, ++seed, 0.2, 2)}, {0, 2}, attrs, seed);
  }
}

}  // namespace
}  // namespace kiln::testing::indexing

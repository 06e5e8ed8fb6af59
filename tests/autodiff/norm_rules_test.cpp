// Finite-difference checks of the BatchNormalization (training and inference mode) and
// InstanceNormalization rules, float64 (<= 1e-6) and float32 (<= 1e-3).
#include <gtest/gtest.h>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"

namespace kiln::testing {
namespace {

std::vector<Tensor> bn_inputs(const Shape& x, uint64_t seed) {
  const int64_t c = x[1];
  return {random_tensor(x, seed, -2.0, 2.0), random_tensor({c}, seed + 1, 0.5, 1.5), random_tensor({c}, seed + 2),
          random_tensor({c}, seed + 3), random_tensor({c}, seed + 4, 0.5, 2.0)};
}

TEST(NormRules, BatchNormTrainingModeThroughBatchStatistics) {
  uint64_t seed = 100;
  for (const Shape& s : {Shape{4, 3}, Shape{2, 3, 5}, Shape{2, 2, 3, 2}}) {
    SCOPED_TRACE(to_string(s));
    Node n = op("BatchNormalization", 5, 1,
                {{"training_mode", Attribute::of_int(1)}, {"epsilon", Attribute::of_float(1e-3f)}});
    both({n, bn_inputs(s, seed), {0, 1, 2}, 15, seed});
    seed += 10;
  }
}

// With the running statistics as outputs, the loss also sees running_mean = m * input_mean +
// (1 - m) * batch_mean and running_var (unbiased batch variance): gradients reach X through them
// and input_mean / input_var get m * their output gradients.
TEST(NormRules, BatchNormTrainingModeWithRunningStatisticsOutputs) {
  Node n = op("BatchNormalization", 5, 3,
              {{"training_mode", Attribute::of_int(1)}, {"momentum", Attribute::of_float(0.7f)}});
  both({n, bn_inputs({3, 2, 4}, 130), {0, 1, 2, 3, 4}, 14, 130});
}

TEST(NormRules, BatchNormInferenceModeAllInputs) {
  Node n = op("BatchNormalization", 5, 1, {{"epsilon", Attribute::of_float(1e-2f)}});
  both({n, bn_inputs({2, 3, 2, 2}, 150), {0, 1, 2, 3, 4}, 15, 150});
  both({n, bn_inputs({5, 4}, 160), {0, 1, 2, 3, 4}, 13, 160});
}

TEST(NormRules, InstanceNormalization) {
  uint64_t seed = 170;
  for (const Shape& s : {Shape{2, 3, 4}, Shape{1, 2, 3, 3}, Shape{2, 2, 2, 2, 2}}) {
    SCOPED_TRACE(to_string(s));
    Node n = op("InstanceNormalization", 3, 1, {{"epsilon", Attribute::of_float(1e-3f)}});
    both({n,
          {random_tensor(s, seed, -2.0, 2.0), random_tensor({s[1]}, seed + 1, 0.5, 1.5),
           random_tensor({s[1]}, seed + 2)},
          {0, 1, 2},
          17,
          seed});
    seed += 10;
  }
}

}  // namespace
}  // namespace kiln::testing

// Finite-difference checks of the activation gradient rules added for the math family, with
// non-default attributes. Inputs are random in ranges that cross each op's kinks or thresholds;
// a draw within the checker's step (1e-6) of one has probability ~1e-5, and the seeds are fixed.
#include <gtest/gtest.h>

#include "autodiff/rule_helpers.h"

namespace kiln::testing::math {
namespace {

Attribute f(float v) { return Attribute::of_float(v); }

TEST(ActivationGradients, SmoothOps) {
  uint64_t seed = 300;
  for (const char* type : {"Softsign", "Gelu"})
    both({op(type, 1), {random_tensor({3, 5}, ++seed, -4, 4)}, {0}, 17, seed});
  both({op("Mish", 1), {random_tensor({3, 5}, ++seed, -4, 4)}, {0}, 18, seed});  // Mish is opset 18
  both({op("Gelu", 1, 1, {{"approximate", Attribute::of_string("tanh")}}),
        {random_tensor({3, 5}, ++seed, -4, 4)},
        {0},
        17,
        seed});
  for (const char* form : {"none", "tanh"}) {  // the fused node the Gelu fusion writes
    Node fused = op("Gelu", 1, 1, {{"approximate", Attribute::of_string(form)}});
    fused.domain = kKilnDomain;
    both({fused, {random_tensor({4, 70}, ++seed, -6, 6)}, {0}, 17, seed});
  }
  both({op("Celu", 1, 1, {{"alpha", f(0.8f)}}), {random_tensor({3, 5}, ++seed, -3, 3)}, {0}, 17, seed});
  both({op("Selu", 1, 1, {{"alpha", f(1.3f)}, {"gamma", f(0.9f)}}),
        {random_tensor({3, 5}, ++seed, -3, 3)},
        {0},
        17,
        seed});
  both({op("Selu", 1), {random_tensor({3, 5}, ++seed, -3, 3)}, {0}, 17, seed});
}

TEST(ActivationGradients, PiecewiseOpsOnBothSidesOfTheirKinks) {
  uint64_t seed = 320;
  both({op("HardSigmoid", 1, 1, {{"alpha", f(0.3f)}, {"beta", f(0.4f)}}),
        {random_tensor({4, 5}, ++seed, -4, 4)},
        {0},
        17,
        seed});
  both({op("HardSigmoid", 1), {random_tensor({4, 5}, ++seed, -4, 4)}, {0}, 17, seed});
  both({op("HardSwish", 1), {random_tensor({4, 5}, ++seed, -5, 5)}, {0}, 17, seed});
  both({op("Shrink", 1, 1, {{"lambd", f(0.7f)}, {"bias", f(0.2f)}}),
        {random_tensor({4, 5}, ++seed, -2, 2)},
        {0},
        17,
        seed});
  both({op("ThresholdedRelu", 1, 1, {{"alpha", f(0.4f)}}), {random_tensor({4, 5}, ++seed, -2, 2)}, {0}, 17, seed});
}

// The slope broadcasts to X (per channel, per last dim, one scalar): its gradient is summed back.
TEST(ActivationGradients, PReluBothInputsWithBroadcastSlopes) {
  uint64_t seed = 340;
  for (Shape slope : {Shape{3, 1}, Shape{4}, Shape{1}, Shape{2, 3, 4}})
    both({op("PRelu", 2),
          {random_tensor({2, 3, 4}, ++seed), random_tensor(slope, ++seed, 0.05, 0.5)},
          {0, 1},
          17,
          seed});
}

}  // namespace
}  // namespace kiln::testing::math

// Finite-difference checks of the Slice gradient (ai.kiln.SliceGrad): steps other than 1, negative
// steps, negative and out-of-range starts/ends, a subset of axes, and the attribute form (opset 9).
#include <gtest/gtest.h>

#include "autodiff/rule_helpers.h"

namespace kiln::testing::indexing {
namespace {

TEST(SliceGradients, StepsAxesAndClamping) {
  uint64_t seed = 50;
  // starts, ends, axes, steps
  both("Slice", {random_tensor({4, 5}, ++seed), ints({1, 0}), ints({1000, -1}), Tensor(), Tensor()}, {0}, {}, seed);
  both("Slice", {random_tensor({4, 6}, ++seed), ints({0}), ints({6}), ints({1}), ints({2})}, {0}, {}, seed);
  both("Slice", {random_tensor({5, 3, 4}, ++seed), ints({-1, 3}), ints({-1000, 0}), ints({0, -1}), ints({-2, -1})}, {0},
       {}, seed);
  both("Slice", {random_tensor({2, 7}, ++seed), ints({-6}), ints({7}), ints({1}), ints({3})}, {0}, {}, seed);
}

TEST(SliceGradients, AttributeFormAtOpset9) {
  GradCheck c{node("Slice", {Tensor()},
                   {{"starts", Attribute::of_ints({1, -3})},
                    {"ends", Attribute::of_ints({3, 100})},
                    {"axes", Attribute::of_ints({0, 2})}}),
              {random_tensor({3, 2, 4}, 60)},
              {0},
              9,
              60};
  c.node.inputs = {"x"};
  check_gradient(c);
  c.float32 = true;
  check_gradient(c);
}

}  // namespace
}  // namespace kiln::testing::indexing

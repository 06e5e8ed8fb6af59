// Finite-difference checks of the gradients of ScatterElements, Scatter and ScatterND, for data
// and updates: reduction none (distinct positions; ONNX leaves repeats undefined) and add (with
// repeated positions), negative indices, non-default axes.
#include <gtest/gtest.h>

#include "autodiff/rule_helpers.h"
#include "test_util.h"

namespace kiln::testing::indexing {
namespace {

using kiln::test::expect_error;

TEST(ScatterGradients, ScatterElementsNoneOnAxis1) {
  const Tensor idx = ints({3, -4, 1, 0, 2, -1}, {2, 3});
  both("ScatterElements", {random_tensor({2, 4}, 30), idx, random_tensor({2, 3}, 31)}, {0, 2}, {{"axis", i(1)}}, 30);
  both("ScatterElements", {random_tensor({3, 2}, 32), ints({2, 0}, {1, 2}), random_tensor({1, 2}, 33)}, {0, 2}, {}, 32);
}

TEST(ScatterGradients, ScatterElementsAddWithRepeats) {
  const Tensor idx = ints({1, 1, -3, 2, 2, 2}, {2, 3});
  both("ScatterElements", {random_tensor({2, 3}, 34), idx, random_tensor({2, 3}, 35)}, {0, 2},
       {{"axis", i(-1)}, {"reduction", s("add")}}, 34);
}

TEST(ScatterGradients, DeprecatedScatterAtOpset10) {
  both("Scatter", {random_tensor({3, 3}, 36), ints({1, 0, 2, 0, 2, 1}, {2, 3}), random_tensor({2, 3}, 37)}, {0}, {}, 36,
       10);
}

TEST(ScatterGradients, ScatterNDNoneAndAdd) {
  // Rows 2 and 0 of a [3, 4] tensor replaced by whole slices.
  both("ScatterND", {random_tensor({3, 4}, 40), ints({2, -3}, {2, 1}), random_tensor({2, 4}, 41)}, {0, 2}, {}, 40);
  // Single elements, tuples of length 2.
  both("ScatterND", {random_tensor({3, 4}, 42), ints({0, 1, 2, -1, 1, 3}, {3, 2}), random_tensor({3}, 43)}, {0, 2}, {},
       42);
  // add: the tuple (1, 2) repeats.
  both("ScatterND", {random_tensor({3, 4}, 44), ints({1, 2, 0, 0, 1, 2}, {3, 2}), random_tensor({3}, 45)}, {0, 2},
       {{"reduction", s("add")}}, 44);
}

// max / min (opset 18), with repeated indices: the gradient goes to whichever of data and the
// updates holds the result at each position (random values: no ties, where the result is not
// differentiable).
TEST(ScatterGradients, MaxAndMinReductionsWithRepeats) {
  for (const char* r : {"max", "min"}) {
    both("ScatterElements", {random_tensor({2, 3}, 48), ints({1, 1, 0, 2, 2, 2}, {2, 3}), random_tensor({2, 3}, 49)},
         {0, 2}, {{"axis", i(-1)}, {"reduction", s(r)}}, 48, 18);
    both("ScatterND", {random_tensor({3, 4}, 50), ints({1, 2, 0, 0, 1, 2}, {3, 2}), random_tensor({3}, 51)}, {0, 2},
         {{"reduction", s(r)}}, 50, 18);
  }
}

// mul (opset 16), with repeated indices: each factor's gradient is the product of the others
// (random values: no zeros here; zeros are checked against torch in test_scatter_reduce_grad.py).
TEST(ScatterGradients, MulReductionWithRepeats) {
  both("ScatterElements",
       {random_tensor({2, 3}, 52, 0.5, 1.5), ints({1, 1, 0, 2, 2, 2}, {2, 3}), random_tensor({2, 3}, 53, 0.5, 1.5)},
       {0, 2}, {{"axis", i(-1)}, {"reduction", s("mul")}}, 52, 16);
  both("ScatterND",
       {random_tensor({3, 4}, 54, -1.5, 1.5), ints({1, 2, 0, 0, 1, 2}, {3, 2}), random_tensor({3}, 55, -1.5, 1.5)},
       {0, 2}, {{"reduction", s("mul")}}, 54, 16);
}

}  // namespace
}  // namespace kiln::testing::indexing

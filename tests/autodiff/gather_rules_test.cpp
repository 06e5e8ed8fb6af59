// Finite-difference checks of the gradients of Gather, GatherElements and GatherND (ai.kiln
// GatherGrad, GatherElementsGrad, GatherNDGrad): negative and repeated indices, several axes,
// batch_dims; and the scatter-add kernel against a hand-computed value.
#include <gtest/gtest.h>

#include "autodiff/rule_helpers.h"
#include "kiln/autodiff.h"
#include "kiln/kernel.h"

namespace kiln::testing::indexing {
namespace {

TEST(GatherGradients, AxesWithNegativeAndRepeatedIndices) {
  // Index 1 appears three times (as 1 and -2 on an axis of size 3), so rows must accumulate.
  both("Gather", {random_tensor({3, 4}, 1), ints({1, -2, 0, 1})}, {0}, {}, 1);
  both("Gather", {random_tensor({2, 3, 4}, 2), ints({2, -1, 0, 2, 3, 3}, {2, 3})}, {0}, {{"axis", i(2)}}, 2);
  both("Gather", {random_tensor({2, 3, 4}, 3), ints({-3, 1}, {2})}, {0}, {{"axis", i(-2)}}, 3);
  both("Gather", {random_tensor({5, 3}, 4), Tensor::scalar<int64_t>(-1)}, {0}, {}, 4);
  both("Gather", {random_tensor({4, 2}, 5), Tensor::from_vector<int32_t>({3}, {3, -1, 0})}, {0}, {}, 5);
}

TEST(GatherGradients, GatherGradKernelAccumulatesRepeats) {
  Node n = node("GatherGrad", {Tensor(), Tensor(), Tensor()});
  n.inputs = {"dy", "shape", "idx"};
  n.domain = kKilnDomain;
  n.attrs["axis"] = i(1);
  // data [2, 3]; indices [2, -1, 2] on axis 1: column 2 receives three terms.
  const Tensor dy = Tensor::from_vector<double>({2, 3}, {1, 2, 4, 8, 16, 32});
  const auto out = run_node(n, {dy, ints({2, 3}), ints({2, -1, 2})}, 1);
  const std::vector<double> expected{0, 0, 7, 0, 0, 56};
  ASSERT_EQ(out[0].shape(), (Shape{2, 3}));
  for (int64_t k = 0; k < 6; ++k) EXPECT_EQ(out[0].data<double>()[k], expected[k]) << k;
}

TEST(GatherGradients, GatherElementsWithRepeats) {
  both("GatherElements", {random_tensor({3, 4}, 10), ints({0, -1, 3, 3, 1, 1, 1, -4, 2, 2, 0, 0}, {3, 4})}, {0},
       {{"axis", i(1)}}, 10);
  // Indices smaller than data off the axis.
  both("GatherElements", {random_tensor({3, 2, 2}, 11), ints({2, 0, -1, 1}, {2, 1, 2})}, {0}, {}, 11);
}

TEST(GatherGradients, GatherNDWithBatchDimsAndRepeatedTuples) {
  both("GatherND", {random_tensor({3, 4}, 20), ints({0, 1, 2, -1, 0, 1}, {3, 2})}, {0}, {}, 20);
  both("GatherND", {random_tensor({3, 4, 2}, 21), ints({1, -1, 1, 2}, {2, 1, 2})}, {0}, {}, 21);
  both("GatherND", {random_tensor({2, 3, 4}, 22), ints({1, 2, 1, 2, 0, -1, 2, 3}, {2, 2, 2})}, {0},
       {{"batch_dims", i(1)}}, 22);
  both("GatherND", {random_tensor({2, 3, 2}, 23), ints({1, 1, 0, 2}, {2, 2, 1})}, {0}, {{"batch_dims", i(1)}}, 23);
}

}  // namespace
}  // namespace kiln::testing::indexing

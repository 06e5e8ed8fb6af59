// Finite-difference checks of Compress's gradient (a Gather of the condition's true positions:
// ai.kiln.GatherGrad), along axes, negative axes, without an axis (flattened) and with a condition
// shorter than the axis; and the forward against hand-picked slices.
#include <gtest/gtest.h>

#include "autodiff/rule_helpers.h"
#include "kiln/kernel.h"

namespace kiln::testing::indexing {
namespace {

Tensor mask(std::vector<bool> v) {
  Tensor t = Tensor::empty(DType::Bool, {static_cast<int64_t>(v.size())});
  for (size_t k = 0; k < v.size(); ++k) t.data<bool>()[k] = v[k];
  return t;
}

TEST(CompressGradients, AxesFlattenedAndShortConditions) {
  both("Compress", {random_tensor({3, 4}, 1), mask({true, false, true})}, {0}, {{"axis", i(0)}}, 1, 11);
  both("Compress", {random_tensor({2, 3, 4}, 2), mask({false, true, true, true})}, {0}, {{"axis", i(-1)}}, 2, 11);
  both("Compress", {random_tensor({2, 3}, 3), mask({true, false, false, true, true})}, {0}, {}, 3, 11);
  both("Compress", {random_tensor({2, 5}, 4), mask({true, true})}, {0}, {{"axis", i(1)}}, 4, 9);  // short
}

TEST(CompressGradients, ForwardPicksTheSlicesAndRefusesOutOfRangeTrues) {
  const Tensor x = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  const auto out =
      run_node(node("Compress", {x, mask({false, true, true})}, {{"axis", i(1)}}), {x, mask({false, true, true})}, 11);
  ASSERT_EQ(out[0].shape(), (Shape{2, 2}));
  EXPECT_EQ((std::vector<float>(out[0].data<float>(), out[0].data<float>() + 4)), (std::vector<float>{2, 3, 5, 6}));
  EXPECT_THROW(run_node(node("Compress", {x, mask({false, false, false, true})}, {{"axis", i(1)}}),
                        {x, mask({false, false, false, true})}, 11),
               InvalidArgument);
}

}  // namespace
}  // namespace kiln::testing::indexing

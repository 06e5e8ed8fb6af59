// Finite-difference checks of CumSum's gradient rule over every exclusive/reverse combination and
// several axes (int64 and int32 axis inputs, negative axes).
#include <gtest/gtest.h>

#include "autodiff/rule_helpers.h"

namespace kiln::testing::math {
namespace {

TEST(CumSumGradients, EveryModeAndAxis) {
  uint64_t seed = 700;
  for (int64_t exclusive : {0, 1})
    for (int64_t reverse : {0, 1})
      for (int64_t axis : {0, 1, -1}) {
        ++seed;
        Node n =
            op("CumSum", 2, 1, {{"exclusive", Attribute::of_int(exclusive)}, {"reverse", Attribute::of_int(reverse)}});
        both({n, {random_tensor({3, 4, 2}, seed), Tensor::scalar<int64_t>(axis)}, {0}, 17, seed});
      }
  both({op("CumSum", 2, 1, {{"reverse", Attribute::of_int(1)}}),
        {random_tensor({5}, 720), Tensor::scalar<int32_t>(0)},
        {0},
        17,
        720});
}

}  // namespace
}  // namespace kiln::testing::math

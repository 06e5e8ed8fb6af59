// Finite-difference checks of Trilu's gradient rule (upper and lower, with k offsets).
#include <gtest/gtest.h>

#include "autodiff/rule_helpers.h"

namespace kiln::testing::math {
namespace {

TEST(GeneratorGradients, TriluMasksTheGradient) {
  uint64_t seed = 1000;
  for (int64_t upper : {0, 1}) {
    both({op("Trilu", 1, 1, {{"upper", Attribute::of_int(upper)}}), {random_tensor({2, 3, 4}, ++seed)}, {0}, 17, seed});
    for (int64_t k : {-1, 2})
      both({op("Trilu", 2, 1, {{"upper", Attribute::of_int(upper)}}),
            {random_tensor({4, 3}, ++seed), ints({k})},
            {0},
            17,
            seed});
  }
}

}  // namespace
}  // namespace kiln::testing::math

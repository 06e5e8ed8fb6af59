// Finite-difference checks of TopK's gradient rule: largest and smallest, several axes, with the
// indices output used and unused. Random inputs have no ties (the order is then stable under the
// checker's steps).
#include <gtest/gtest.h>

#include "autodiff/rule_helpers.h"

namespace kiln::testing::math {
namespace {

TEST(TopKGradients, ValuesScatterBackToTheirPositions) {
  uint64_t seed = 800;
  struct Case {
    int64_t axis, k, largest;
  };
  for (const Case& c : {Case{1, 2, 1}, Case{-1, 3, 0}, Case{0, 1, 1}, Case{0, 3, 0}}) {
    ++seed;
    Node n = op("TopK", 2, 2, {{"axis", Attribute::of_int(c.axis)}, {"largest", Attribute::of_int(c.largest)}});
    both({n, {random_tensor({3, 5}, seed), ints({c.k})}, {0}, 17, seed});
  }
}

// TopK-1 (k an attribute) and TopK-10 (before ScatterElements existed).
TEST(TopKGradients, EarlyOpsets) {
  both({op("TopK", 1, 2, {{"axis", Attribute::of_int(0)}, {"k", Attribute::of_int(2)}}),
        {random_tensor({4, 3}, 820)},
        {0},
        9,
        820});
  both({op("TopK", 2, 2), {random_tensor({3, 4}, 821), ints({3})}, {0}, 10, 821});
}

// Only the values output exists: the rule recomputes the indices with a second TopK.
TEST(TopKGradients, WithoutAnIndicesOutput) {
  Node n = op("TopK", 2, 1, {{"axis", Attribute::of_int(1)}});
  both({n, {random_tensor({2, 3, 4}, 810), ints({2})}, {0}, 17, 810});
}

}  // namespace
}  // namespace kiln::testing::math

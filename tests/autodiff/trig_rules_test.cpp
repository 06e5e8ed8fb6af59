// Finite-difference checks of the trigonometric and hyperbolic gradient rules, each on inputs
// inside its op's domain (asin/acos/atanh on (-1, 1), acosh on (1, inf)) away from the poles.
#include <gtest/gtest.h>

#include "autodiff/rule_helpers.h"

namespace kiln::testing::math {
namespace {

struct Case {
  const char* type;
  double lo, hi;
};

TEST(TrigGradients, EveryOpInsideItsDomain) {
  uint64_t seed = 200;
  for (const Case& c : {Case{"Sin", -3, 3}, Case{"Cos", -3, 3}, Case{"Tan", -1.2, 1.2}, Case{"Asin", -0.9, 0.9},
                        Case{"Acos", -0.9, 0.9}, Case{"Atan", -3, 3}, Case{"Sinh", -2, 2}, Case{"Cosh", -2, 2},
                        Case{"Asinh", -3, 3}, Case{"Acosh", 1.2, 4}, Case{"Atanh", -0.9, 0.9}}) {
    ++seed;
    both({op(c.type, 1), {random_tensor({2, 3, 4}, seed, c.lo, c.hi)}, {0}, 17, seed});
  }
}

// Rank 0 and rank 1 inputs.
TEST(TrigGradients, ScalarAndVector) {
  both({op("Sin", 1), {random_tensor({}, 230, -2, 2)}, {0}, 17, 230});
  both({op("Atanh", 1), {random_tensor({7}, 231, -0.5, 0.5)}, {0}, 17, 231});
}

}  // namespace
}  // namespace kiln::testing::math

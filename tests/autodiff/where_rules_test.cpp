// Finite-difference checks of Where's gradient rule, with condition, X and Y broadcast together.
#include <gtest/gtest.h>

#include <random>

#include "autodiff/rule_helpers.h"

namespace kiln::testing::math {
namespace {

Tensor random_bools(Shape shape, uint64_t seed) {
  Tensor t = Tensor::empty(DType::Bool, std::move(shape));
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<bool>()[i] = (rng() & 1) != 0;
  return t;
}

TEST(WhereGradients, XAndYWithBroadcasting) {
  uint64_t seed = 600;
  struct Shapes {
    Shape c, x, y;
  };
  for (const Shapes& s : {Shapes{{3, 4}, {3, 4}, {3, 4}}, Shapes{{2, 1, 4}, {3, 1}, {4}}, Shapes{{3, 4}, {}, {1, 4}},
                          Shapes{{4}, {2, 3, 4}, {2, 1, 1}}}) {
    ++seed;
    both({op("Where", 3),
          {random_bools(s.c, seed), random_tensor(s.x, seed + 100), random_tensor(s.y, seed + 200)},
          {1, 2},
          17,
          seed});
  }
}

}  // namespace
}  // namespace kiln::testing::math

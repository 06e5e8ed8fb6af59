// Finite-difference checks of the gradients of Det (ai.kiln.DetGrad: invertible and singular
// matrices, batches), MaxUnpool (with and without output_shape) and ReverseSequence (both axis
// orders); float64 (<= 1e-6) and float32 (<= 1e-3).
#include <gtest/gtest.h>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"

namespace kiln::testing {
namespace {

TEST(DetGradient, InvertibleAndSingular) {
  both({op("Det", 1), {random_tensor({3, 4, 4}, 6501)}, {0}, 17, 6501});
  both({op("Det", 1), {random_tensor({1, 1}, 6502)}, {0}, 17, 6502});
  // Rank 2 of 3: det = 0 but the cofactors (the gradient) are not all zero.
  const Tensor singular = Tensor::from_vector<double>({3, 3}, {1, 2, 3, 2, 4.5, 1, 3, 6.5, 4});
  check_gradient({op("Det", 1), {singular}, {0}, 17, 6503});
}

TEST(MaxUnpoolGradient, WithAndWithoutOutputShape) {
  const auto attrs = std::map<std::string, Attribute>{{"kernel_shape", Attribute::of_ints({2, 2})},
                                                      {"strides", Attribute::of_ints({2, 2})}};
  const Tensor idx = ints({5, 7, 13, 15, 0, 2, 9, 11}, {1, 2, 2, 2});  // distinct positions of a 4 x 4 plane
  both({indexing::node("MaxUnpool", {random_tensor({1, 2, 2, 2}, 6504), idx}, attrs),
        {random_tensor({1, 2, 2, 2}, 6504), idx},
        {0},
        17,
        6504});
  const Tensor shape = ints({1, 2, 5, 5});
  both({indexing::node("MaxUnpool", {random_tensor({1, 2, 2, 2}, 6505), idx, shape}, attrs),
        {random_tensor({1, 2, 2, 2}, 6505), idx, shape},
        {0},
        17,
        6505});
}

TEST(ReverseSequenceGradient, BothAxisOrders) {
  indexing::both("ReverseSequence", {random_tensor({4, 3, 2}, 6506), ints({4, 1, 2})}, {0},
                 {{"time_axis", indexing::i(0)}, {"batch_axis", indexing::i(1)}}, 6506);
  indexing::both("ReverseSequence", {random_tensor({3, 5, 2}, 6507), ints({0, 5, 3})}, {0},
                 {{"time_axis", indexing::i(1)}, {"batch_axis", indexing::i(0)}}, 6507);
}

}  // namespace
}  // namespace kiln::testing

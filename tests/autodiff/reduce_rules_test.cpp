// Finite-difference checks of the reduction gradient rules: axes as an attribute (opset 17) and as
// an input (opset 18), keepdims 0 and 1, negative and absent axes; ties for ReduceMax/Min, zeros
// for ReduceProd and an all-zero slice for ReduceL2.
#include <gtest/gtest.h>

#include "autodiff/rule_helpers.h"

namespace kiln::testing::math {
namespace {

Attribute keepdims(int64_t k) { return Attribute::of_int(k); }

// One op over several axes/keepdims/opset combinations, inputs drawn in [lo, hi).
void check_reduction(const char* type, double lo, double hi, uint64_t seed) {
  const Shape shape{2, 3, 4};
  struct Axes {
    std::vector<int64_t> axes;
    int64_t keep;
  };
  for (const Axes& a : {Axes{{1}, 0}, Axes{{0, 2}, 1}, Axes{{-1}, 0}, Axes{{}, 0}, Axes{{}, 1}}) {
    ++seed;
    std::map<std::string, Attribute> attrs{{"keepdims", keepdims(a.keep)}};
    // Opset 17: axes attribute.
    std::map<std::string, Attribute> attr17 = attrs;
    if (!a.axes.empty()) attr17["axes"] = Attribute::of_ints(a.axes);
    both({op(type, 1, 1, attr17), {random_tensor(shape, seed, lo, hi)}, {0}, 17, seed});
    // Opset 18: axes input (absent means all axes).
    if (a.axes.empty()) both({op(type, 1, 1, attrs), {random_tensor(shape, seed, lo, hi)}, {0}, 18, seed});
    else both({op(type, 2, 1, attrs), {random_tensor(shape, seed, lo, hi), ints(a.axes)}, {0}, 18, seed});
  }
}

TEST(ReduceGradients, SumSquareL1L2LogSumExp) {
  check_reduction("ReduceSumSquare", -1, 1, 400);
  check_reduction("ReduceL1", -1, 1, 410);
  check_reduction("ReduceL2", -1, 1, 420);
  check_reduction("ReduceLogSumExp", -3, 3, 430);
}

TEST(ReduceGradients, LogSumOfPositiveInputs) { check_reduction("ReduceLogSum", 0.5, 2, 440); }

// Random inputs have no ties: the gradient goes to the one extremum of each slice.
TEST(ReduceGradients, MaxMinProd) {
  check_reduction("ReduceMax", -1, 1, 450);
  check_reduction("ReduceMin", -1, 1, 460);
  check_reduction("ReduceProd", 0.5, 1.5, 470);
  check_reduction("ReduceProd", -1.5, 1.5, 480);
}

// With two equal extrema a central difference moves the result by h one way and not the other:
// it measures 1/2 for each, which is the even split the rule gives (as PyTorch's amax).
TEST(ReduceGradients, MaxMinSplitTwoWayTiesEvenly) {
  const Tensor x = Tensor::from_vector<double>({2, 4}, {0.5, -0.25, 0.5, 0.125,     // max tie in row 0
                                                        -0.75, 0.25, -0.75, 0.0});  // min tie in row 1
  for (const char* type : {"ReduceMax", "ReduceMin"}) {
    both({op(type, 1, 1, {{"axes", Attribute::of_ints({1})}, {"keepdims", keepdims(0)}}), {x}, {0}, 17, 490});
    // And over all elements: the tie of 0.5 (max) and of -0.75 (min).
    both({op(type, 1, 1, {{"keepdims", keepdims(0)}}), {x}, {0}, 17, 491});
  }
}

// Product with one zero in a slice (only the zero gets a gradient) and two (none does).
TEST(ReduceGradients, ProdWithZeros) {
  const Tensor x = Tensor::from_vector<double>({3, 3}, {0.0, 1.5, -0.8,    // one zero
                                                        0.0, 0.7, 0.0,     // two zeros
                                                        1.2, -0.6, 0.9});  // none
  both({op("ReduceProd", 1, 1, {{"axes", Attribute::of_ints({1})}}), {x}, {0}, 17, 500});
  both({op("ReduceProd", 2, 1, {{"keepdims", keepdims(0)}}), {x, ints({0})}, {0}, 18, 501});
}

// The norm of an all-zero slice has no derivative; the rule gives 0 there (PyTorch's choice), and
// so does a central difference of |x| at 0.
TEST(ReduceGradients, L2OfAZeroSliceIsZero) {
  const Tensor x = Tensor::from_vector<double>({2, 3}, {0.0, 0.0, 0.0, 0.3, -0.4, 0.5});
  both({op("ReduceL2", 1, 1, {{"axes", Attribute::of_ints({1})}}), {x}, {0}, 17, 510});
}

TEST(ReduceGradients, SumAndMeanAtOpsetsWithAxesInputs) {
  both({op("ReduceSum", 2, 1, {{"keepdims", keepdims(0)}}),
        {random_tensor({2, 3, 4}, 520), ints({1, -1})},
        {0},
        18,
        520});
  both({op("ReduceMean", 2, 1, {{"keepdims", keepdims(0)}}),
        {random_tensor({2, 3, 4}, 521), ints({0, 2})},
        {0},
        18,
        521});
}

// Before opset 13 the emitted Unsqueeze and ReduceSum take their axes as attributes.
TEST(ReduceGradients, AttributeAxesBeforeOpset13) {
  const std::map<std::string, Attribute> attrs{{"axes", Attribute::of_ints({0, 2})}, {"keepdims", keepdims(0)}};
  for (const char* type : {"ReduceMax", "ReduceProd", "ReduceLogSumExp", "ReduceSum"})
    both({op(type, 1, 1, attrs), {random_tensor({2, 3, 4}, 540, 0.5, 1.5)}, {0}, 11, 540});
}

// noop_with_empty_axes=1 with no axes input makes the op an identity, and its gradient too.
TEST(ReduceGradients, NoopWithEmptyAxesPassesTheGradient) {
  const std::map<std::string, Attribute> noop{{"noop_with_empty_axes", Attribute::of_int(1)}};
  for (const char* type : {"ReduceL2", "ReduceMax", "ReduceLogSumExp"})
    both({op(type, 1, 1, noop), {random_tensor({2, 3}, 530)}, {0}, 18, 530});
  both({op("ReduceSum", 1, 1, noop), {random_tensor({2, 3}, 531)}, {0}, 13, 531});
}

}  // namespace
}  // namespace kiln::testing::math

// Finite-difference checks of the MeanVarianceNormalization, LpNormalization and LRN rules.
#include <gtest/gtest.h>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"

namespace kiln::testing {
namespace {

Node op(const std::string& type, std::map<std::string, Attribute> attrs) {
  Node n;
  n.op_type = type;
  n.inputs = {"in"};
  n.outputs = {"out"};
  n.attrs = std::move(attrs);
  return n;
}

TEST(NormalizeRules, MeanVarianceNormalizationAxes) {
  both({op("MeanVarianceNormalization", {}), {random_tensor({2, 3, 2, 2}, 300, -2.0, 2.0)}, {0}, 13, 300});
  both({op("MeanVarianceNormalization", {{"axes", Attribute::of_ints({1})}}),
        {random_tensor({3, 4}, 301, -2.0, 2.0)},
        {0},
        13,
        301});
  both({op("MeanVarianceNormalization", {{"axes", Attribute::of_ints({-1, 0})}}),
        {random_tensor({3, 2, 4}, 302, -2.0, 2.0)},
        {0},
        17,
        302});
}

TEST(NormalizeRules, LpNormalizationL1AndL2) {
  uint64_t seed = 310;
  for (int64_t p : {1, 2})
    for (int64_t axis : {-1, 0, 1}) {
      // Away from 0 so that |x| has no kink for p = 1.
      Tensor x = random_tensor({3, 4, 2}, ++seed, 0.2, 1.5);
      for (int64_t i = 0; i < x.numel(); i += 3) x.data<double>()[i] = -x.data<double>()[i];
      both({op("LpNormalization", {{"p", Attribute::of_int(p)}, {"axis", Attribute::of_int(axis)}}),
            {x},
            {0},
            17,
            seed});
    }
}

TEST(NormalizeRules, LrnOddAndEvenSizes) {
  uint64_t seed = 330;
  for (int64_t size : {1, 2, 3, 4}) {
    Node n = op("LRN", {{"size", Attribute::of_int(size)},
                        {"alpha", Attribute::of_float(0.5f)},
                        {"beta", Attribute::of_float(0.6f)},
                        {"bias", Attribute::of_float(1.5f)}});
    both({n, {random_tensor({2, 5, 3}, ++seed, -2.0, 2.0)}, {0}, 17, seed});
  }
  Node n = op("LRN", {{"size", Attribute::of_int(3)}});
  both({n, {random_tensor({1, 4, 2, 2}, ++seed, -2.0, 2.0)}, {0}, 17, seed});
}

}  // namespace
}  // namespace kiln::testing

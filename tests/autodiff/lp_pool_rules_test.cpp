// Finite-difference checks of the LpPool (ai.kiln.LpPoolGrad) and GlobalLpPool gradients for
// p = 1, 2, 3 with strides, pads and dilations, float64 (<= 1e-6) and float32 (<= 1e-3). p = 1 has
// a kink at 0, so its inputs stay positive.
#include <gtest/gtest.h>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"

namespace kiln::testing {
namespace {

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

Node lp(const std::string& type, int64_t p, std::map<std::string, Attribute> attrs) {
  Node n;
  n.op_type = type;
  n.inputs = {"x"};
  n.outputs = {"y"};
  n.attrs = std::move(attrs);
  n.attrs["p"] = Attribute::of_int(p);
  return n;
}

TEST(LpPoolGradient, WindowsAndNorms) {
  uint64_t seed = 1100;
  for (int64_t p : {1, 2, 3}) {
    const double lo = p == 1 ? 0.2 : -1.0;
    both({lp("LpPool", p, {{"kernel_shape", ints({2, 2})}}),
          {random_tensor({2, 2, 4, 5}, ++seed, lo, 1.0)},
          {0},
          17,
          seed});
    both({lp("LpPool", p, {{"kernel_shape", ints({3, 2})}, {"strides", ints({2, 1})}, {"pads", ints({1, 0, 1, 1})}}),
          {random_tensor({1, 2, 6, 5}, ++seed, lo, 1.0)},
          {0},
          17,
          seed});
    both({lp("LpPool", p, {{"kernel_shape", ints({3})}, {"strides", ints({2})}, {"dilations", ints({2})}}),
          {random_tensor({1, 3, 9}, ++seed, lo, 1.0)},
          {0},
          18,
          seed});
  }
}

TEST(LpPoolGradient, GlobalLpPool) {
  uint64_t seed = 1200;
  for (int64_t p : {1, 2, 3}) {
    const double lo = p == 1 ? 0.2 : -1.0;
    both({lp("GlobalLpPool", p, {}), {random_tensor({2, 3, 3, 4}, ++seed, lo, 1.0)}, {0}, 17, seed});
  }
}

}  // namespace
}  // namespace kiln::testing

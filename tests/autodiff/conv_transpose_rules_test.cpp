// Finite-difference checks of the ConvTranspose gradient (ai.kiln.ConvTransposeGrad): groups,
// strides, dilations, pads, output_padding, output_shape (including an output past the full line),
// auto_pad, 1-D to 3-D, float64 (<= 1e-6) and float32 (<= 1e-3).
#include <gtest/gtest.h>

#include "autodiff/gradient_checker.h"

namespace kiln::testing {
namespace {

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

struct Case {
  Shape x, w;  // w: [C, M/group, k...]
  std::map<std::string, Attribute> attrs;
};

void run_cases(const std::vector<Case>& cases, uint64_t seed) {
  for (const Case& c : cases)
    for (bool bias : {true, false}) {
      Node n;
      n.op_type = "ConvTranspose";
      n.inputs = {"x", "w"};
      n.outputs = {"y"};
      n.attrs = c.attrs;
      std::vector<Tensor> in{random_tensor(c.x, ++seed), random_tensor(c.w, ++seed)};
      std::vector<size_t> wrt{0, 1};
      if (bias) {
        const int64_t group = c.attrs.count("group") ? c.attrs.at("group").i : 1;
        n.inputs.push_back("b");
        in.push_back(random_tensor({c.w[1] * group}, ++seed));
        wrt.push_back(2);
      }
      GradCheck check{n, in, wrt, 17, seed};
      check_gradient(check);
      check.float32 = true;
      check_gradient(check);
    }
}

TEST(ConvTransposeGradient, TwoDimensionalGeometries) {
  run_cases(
      {{{2, 3, 3, 4}, {3, 2, 3, 3}, {}},
       {{1, 2, 3, 3}, {2, 3, 3, 2}, {{"strides", ints({2, 3})}, {"pads", ints({1, 0, 0, 1})}}},
       {{1, 2, 3, 4},
        {2, 2, 2, 3},
        {{"strides", ints({2, 2})}, {"output_padding", ints({1, 0})}, {"dilations", ints({2, 1})}}},
       {{1, 4, 3, 3}, {4, 1, 3, 3}, {{"group", Attribute::of_int(2)}, {"strides", ints({2, 1})}}},
       {{1, 2, 3, 3}, {2, 2, 3, 3}, {{"auto_pad", Attribute::of_string("SAME_UPPER")}, {"strides", ints({2, 2})}}},
       {{1, 2, 3, 3}, {2, 2, 2, 2}, {{"auto_pad", Attribute::of_string("SAME_LOWER")}, {"strides", ints({2, 2})}}},
       {{1, 2, 3, 3}, {2, 1, 3, 3}, {{"strides", ints({2, 2})}, {"output_shape", ints({6, 7})}}},
       // output_shape past the full line (7 + 2 extra): positions only the bias reaches.
       {{1, 2, 3, 3}, {2, 1, 3, 3}, {{"strides", ints({2, 2})}, {"output_shape", ints({9, 8})}}}},
      600);
}

TEST(ConvTransposeGradient, OneAndThreeDimensionalAndBlocked) {
  run_cases({{{2, 2, 4}, {2, 3, 3}, {{"strides", ints({3})}, {"pads", ints({1, 2})}, {"dilations", ints({2})}}},
             {{1, 2, 2, 3, 2}, {2, 2, 2, 2, 2}, {{"strides", ints({1, 2, 2})}, {"pads", ints({0, 1, 0, 1, 0, 0})}}},
             {{1, 8, 3, 3}, {8, 8, 3, 3}, {{"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}}},
            700);
}

}  // namespace
}  // namespace kiln::testing

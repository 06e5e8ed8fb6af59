// Finite-difference checks of the gradients of Expand, Tile, Pad (ai.kiln.PadGrad: constant with
// cropping pads and the constant's own gradient, reflect and edge borders wider than one
// reflection), DepthToSpace (DCR and CRD) and SpaceToDepth.
#include <gtest/gtest.h>

#include "autodiff/rule_helpers.h"

namespace kiln::testing::indexing {
namespace {

TEST(ExpandGradients, ExpandSumsBroadcastCopies) {
  both("Expand", {random_tensor({3, 1}, 70), ints({2, 3, 4})}, {0}, {}, 70);
  both("Expand", {random_tensor({1, 4}, 71), ints({3, 1})}, {0}, {}, 71);
  both("Expand", {random_tensor({2, 3}, 72), ints({2, 3})}, {0}, {}, 72);
}

TEST(ExpandGradients, TileSumsRepeats) {
  both("Tile", {random_tensor({2, 3}, 73), ints({2, 3})}, {0}, {}, 73);
  both("Tile", {random_tensor({2, 1, 3}, 74), ints({1, 4, 2})}, {0}, {}, 74);
  both("Tile", {random_tensor({3}, 75), ints({3})}, {0}, {}, 75);
  both("Tile", {random_tensor({2, 3}, 76), ints({3, 2})}, {0}, {}, 76, 12);  // axes as attributes
}

TEST(ExpandGradients, PadConstantWithCroppingAndTheConstant) {
  // pads: begin (1, -1), end (2, 1): rows grow, columns are cropped at the start.
  both("Pad", {random_tensor({3, 4}, 80), ints({1, -1, 2, 1}), Tensor::scalar<double>(0.5)}, {0, 2}, {}, 80);
  both("Pad", {random_tensor({2, 3, 2}, 81), ints({0, 2, 1, 1, 0, 0})}, {0}, {}, 81);
}

TEST(ExpandGradients, PadReflectAndEdgeAccumulateBorders) {
  for (const char* mode : {"reflect", "edge"}) {
    // Pads of 4 on an axis of 3 reflect more than once.
    both("Pad", {random_tensor({2, 3}, 82), ints({1, 4, 2, 3})}, {0}, {{"mode", s(mode)}}, 82);
    both("Pad", {random_tensor({2, 2, 3}, 83), ints({0, 1, 2, 0, 1, -1})}, {0}, {{"mode", s(mode)}}, 83);
  }
}

TEST(ExpandGradients, PadAttributeFormAtOpset10) {
  GradCheck c{node("Pad", {Tensor()}, {{"pads", Attribute::of_ints({1, 0, 0, 2})}, {"mode", s("reflect")}}),
              {random_tensor({3, 3}, 84)},
              {0},
              10,
              84};
  c.node.inputs = {"x"};
  check_gradient(c);
}

TEST(ExpandGradients, DepthToSpaceAndSpaceToDepth) {
  both("DepthToSpace", {random_tensor({2, 8, 2, 3}, 90)}, {0}, {{"blocksize", i(2)}}, 90);
  both("DepthToSpace", {random_tensor({2, 8, 2, 3}, 91)}, {0}, {{"blocksize", i(2)}, {"mode", s("CRD")}}, 91);
  both("DepthToSpace", {random_tensor({1, 18, 1, 2}, 92)}, {0}, {{"blocksize", i(3)}, {"mode", s("CRD")}}, 92);
  both("SpaceToDepth", {random_tensor({2, 2, 4, 6}, 93)}, {0}, {{"blocksize", i(2)}}, 93);
}

}  // namespace
}  // namespace kiln::testing::indexing

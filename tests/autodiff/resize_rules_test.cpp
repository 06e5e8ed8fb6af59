// Finite-difference checks of the Resize gradient (ai.kiln.ResizeGrad): linear with each common
// coordinate transformation, up and down, by scales and by sizes; nearest (several outputs per
// input); cubic; tf_crop_and_resize with extrapolated positions.
#include <gtest/gtest.h>

#include "autodiff/rule_helpers.h"

namespace kiln::testing::indexing {
namespace {

Tensor scales(std::vector<float> v) { return Tensor::from_vector<float>({static_cast<int64_t>(v.size())}, v); }

TEST(ResizeGradients, LinearCoordinateModes) {
  uint64_t seed = 100;
  for (const char* coord : {"asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners"}) {
    const std::map<std::string, Attribute> attrs{{"mode", s("linear")}, {"coordinate_transformation_mode", s(coord)}};
    both("Resize", {random_tensor({1, 2, 3, 4}, ++seed), Tensor(), scales({1, 1, 2.0f, 1.5f})}, {0}, attrs, seed);
    both("Resize", {random_tensor({1, 1, 5, 4}, ++seed), Tensor(), scales({1, 1, 0.6f, 0.5f})}, {0}, attrs, seed);
    both("Resize", {random_tensor({2, 3, 4}, ++seed), Tensor(), Tensor(), ints({2, 1, 7})}, {0}, attrs, seed);
  }
}

TEST(ResizeGradients, NearestAndCubic) {
  both("Resize", {random_tensor({1, 1, 3, 2}, 120), Tensor(), scales({1, 1, 2.5f, 3.0f})}, {0},
       {{"mode", s("nearest")}, {"nearest_mode", s("floor")}}, 120);
  both("Resize", {random_tensor({1, 1, 4, 5}, 121), Tensor(), Tensor(), ints({1, 1, 3, 2})}, {0},
       {{"mode", s("nearest")}, {"coordinate_transformation_mode", s("asymmetric")}}, 121);
  both("Resize", {random_tensor({1, 1, 4, 4}, 122), Tensor(), scales({1, 1, 1.5f, 2.0f})}, {0},
       {{"mode", s("cubic")}, {"exclude_outside", i(1)}, {"cubic_coeff_a", Attribute::of_float(-0.5f)}}, 122);
}

TEST(ResizeGradients, CropAndResizeDropsExtrapolatedPositions) {
  const Tensor roi = Tensor::from_vector<float>({8}, {0, 0, -0.2f, 0.1f, 1, 1, 0.9f, 1.3f});
  both("Resize", {random_tensor({1, 1, 4, 4}, 130), roi, Tensor(), ints({1, 1, 5, 3})}, {0},
       {{"mode", s("linear")},
        {"coordinate_transformation_mode", s("tf_crop_and_resize")},
        {"extrapolation_value", Attribute::of_float(2.0f)}},
       130);
}

}  // namespace
}  // namespace kiln::testing::indexing

// Finite-difference checks of MaxRoiPool's gradient with respect to X (ai.kiln.MaxRoiPoolGrad):
// overlapping regions over two images, a region past the border, a malformed one, fractional bins
// and spatial_scale; float64 (<= 1e-6) and float32 (<= 1e-3). The regions get no gradient.
#include <gtest/gtest.h>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"

namespace kiln::testing {
namespace {

TEST(MaxRoiPoolGradient, RegionsAndBins) {
  uint64_t seed = 6400;
  const Tensor rois = Tensor::from_vector<double>({4, 5}, {1, 0, 1, 4, 4,    //
                                                           0, 1, 0, 3, 5,    //
                                                           1, 3, 2, 9, 9,    //
                                                           0, 4, 4, 2, 2});  // x2 < x1: one pixel
  for (const auto& [pooled, scale] :
       {std::pair{std::vector<int64_t>{2, 2}, 1.0f}, std::pair{std::vector<int64_t>{3, 2}, 0.75f}}) {
    SCOPED_TRACE(to_string(pooled) + " scale " + std::to_string(scale));
    Node n = op("MaxRoiPool", 2, 1,
                {{"pooled_shape", Attribute::of_ints(pooled)}, {"spatial_scale", Attribute::of_float(scale)}});
    both({n, {random_tensor({2, 3, 6, 5}, ++seed), rois}, {0}, 17, seed});
  }
}

}  // namespace
}  // namespace kiln::testing

// Finite-difference checks of RoiAlign's gradient with respect to X (ai.kiln.RoiAlignGrad): avg
// and max modes, both coordinate transformations, fixed and adaptive sampling, regions reaching
// past the border; float64 (<= 1e-6) and float32 (<= 1e-3).
#include <gtest/gtest.h>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"

namespace kiln::testing {
namespace {

TEST(RoiAlignGradient, ModesAndSampling) {
  uint64_t seed = 6300;
  const Tensor rois = Tensor::from_vector<double>({3, 4}, {0.3, 0.6, 4.2, 3.9,  //
                                                           1.1, 0.2, 2.7, 2.4,  //
                                                           -1.5, 2.2, 5.8, 6.5});
  const Tensor batch = ints({1, 0, 1});
  for (const char* mode : {"avg", "max"})
    for (const char* ctm : {"half_pixel", "output_half_pixel"})
      for (int64_t ratio : {0, 2}) {
        SCOPED_TRACE(std::string(mode) + " " + ctm + " sampling_ratio " + std::to_string(ratio));
        Node n = op("RoiAlign", 3, 1,
                    {{"mode", Attribute::of_string(mode)},
                     {"coordinate_transformation_mode", Attribute::of_string(ctm)},
                     {"sampling_ratio", Attribute::of_int(ratio)},
                     {"output_height", Attribute::of_int(2)},
                     {"output_width", Attribute::of_int(3)},
                     {"spatial_scale", Attribute::of_float(0.75f)}});
        both({n, {random_tensor({2, 3, 6, 5}, ++seed), rois, batch}, {0}, 17, seed});
      }
}

}  // namespace
}  // namespace kiln::testing

// Finite-difference checks of GridSample's gradients (ai.kiln.GridSampleGrad) with respect to X
// and the grid, for every mode, padding mode and align_corners, with grid points inside and
// outside [-1, 1]; float64 (<= 1e-6) and float32 (<= 1e-3). Nearest's output is piecewise constant
// in the grid, so only X is differentiated there.
#include <gtest/gtest.h>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"

namespace kiln::testing {
namespace {

TEST(GridSampleGradient, EveryModePaddingAndAlignment) {
  uint64_t seed = 6100;
  for (const char* mode : {"bilinear", "nearest", "bicubic"})
    for (const char* padding : {"zeros", "border", "reflection"})
      for (int64_t align : {0, 1}) {
        SCOPED_TRACE(std::string(mode) + " " + padding + " align_corners " + std::to_string(align));
        Node n = op("GridSample", 2, 1,
                    {{"mode", Attribute::of_string(mode)},
                     {"padding_mode", Attribute::of_string(padding)},
                     {"align_corners", Attribute::of_int(align)}});
        const std::vector<size_t> wrt =
            std::string(mode) == "nearest" ? std::vector<size_t>{0} : std::vector<size_t>{0, 1};
        both({n, {random_tensor({2, 3, 4, 5}, ++seed), random_tensor({2, 3, 2, 2}, ++seed, -1.3, 1.3)}, wrt, 17, seed});
      }
}

}  // namespace
}  // namespace kiln::testing

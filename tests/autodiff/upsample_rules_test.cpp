// Finite-difference checks of the gradients of Upsample (opset 7's scales attribute, opset 9's
// scales input) and Resize-10, nearest and linear, through Resize's ai.kiln.ResizeGrad; float64
// (<= 1e-6) and float32 (<= 1e-3).
#include <gtest/gtest.h>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"

namespace kiln::testing {
namespace {

TEST(UpsampleGradient, NearestAndLinearAtOpsets7To10) {
  uint64_t seed = 7500;
  const Tensor scales = Tensor::from_vector<float>({4}, {1, 1, 2, 1.5f});
  for (const char* mode : {"nearest", "linear"}) {
    SCOPED_TRACE(mode);
    const Attribute m = Attribute::of_string(mode);
    both({op("Upsample", 1, 1, {{"mode", m}, {"scales", Attribute::of_floats({1, 1, 2, 1.5f})}}),
          {random_tensor({1, 2, 3, 4}, ++seed)},
          {0},
          8,
          seed});  // Upsample-7, at opset 8
    both({indexing::node("Upsample", {random_tensor({1, 2, 3, 4}, seed), scales}, {{"mode", m}}),
          {random_tensor({1, 2, 3, 4}, ++seed), scales},
          {0},
          9,
          seed});
    both({indexing::node("Resize", {random_tensor({1, 2, 3, 4}, seed), scales}, {{"mode", m}}),
          {random_tensor({1, 2, 3, 4}, ++seed), scales},
          {0},
          10,
          seed});
  }
}

}  // namespace
}  // namespace kiln::testing

// Finite-difference checks of the DFT and STFT gradients (ai.kiln.DFTGrad / STFTGrad): real and
// complex inputs, forward and inverse, onesided, dft_length cropping and padding, power-of-two
// (FFT) and other lengths, STFT with and without a window; float64 (<= 1e-6) and float32 (<= 1e-3).
#include <gtest/gtest.h>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"

namespace kiln::testing {
namespace {

using indexing::i;
using indexing::node;

TEST(SignalGradient, Dft) {
  uint64_t seed = 6700;
  for (int64_t inverse : {0, 1})
    for (int64_t axis : {1, 2}) {
      const std::map<std::string, Attribute> attrs{{"axis", i(axis)}, {"inverse", i(inverse)}};
      SCOPED_TRACE("inverse " + std::to_string(inverse) + " axis " + std::to_string(axis));
      indexing::both("DFT", {random_tensor({2, 6, 8, 2}, ++seed)}, {0}, attrs, seed, 17);  // complex
      indexing::both("DFT", {random_tensor({2, 6, 8, 1}, ++seed)}, {0}, attrs, seed, 17);  // real
      for (int64_t len : {4, 5, 10, 16}) {  // cropped and padded, FFT and direct
        indexing::both("DFT", {random_tensor({1, 6, 8, 2}, ++seed), ints({len}, {})}, {0}, attrs, seed, 17);
      }
    }
  for (int64_t len : {7, 8}) {
    const std::map<std::string, Attribute> attrs{{"onesided", i(1)}};
    indexing::both("DFT", {random_tensor({2, 6, 3, 1}, ++seed), ints({len}, {})}, {0}, attrs, seed, 17);
  }
}

TEST(SignalGradient, Stft) {
  uint64_t seed = 6800;
  const Tensor step = ints({3}, {}), length = ints({8}, {});
  // No window: frame_length given.
  indexing::both("STFT", {random_tensor({2, 20, 1}, ++seed), step, Tensor(), length}, {0}, {}, seed, 17);
  // A window (differentiated too), onesided and not, real and complex signals.
  indexing::both("STFT", {random_tensor({2, 20, 1}, ++seed), step, random_tensor({8}, ++seed)}, {0, 2}, {}, seed, 17);
  indexing::both("STFT", {random_tensor({1, 21, 2}, ++seed), step, random_tensor({6}, ++seed)}, {0, 2},
                 {{"onesided", i(0)}}, seed, 17);
}

}  // namespace
}  // namespace kiln::testing

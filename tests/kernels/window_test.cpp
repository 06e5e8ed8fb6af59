// HannWindow, HammingWindow, BlackmanWindow through run_node against the cosine-sum formula written
// out here (numpy's hanning / hamming / blackman for the symmetric forms); ONNX's own cases run in
// the conformance suite.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

Tensor window(const std::string& op, Tensor size, std::map<std::string, Attribute> attrs = {}) {
  return run_node(make_node(op, 1, std::move(attrs)), {std::move(size)}, 17)[0];
}

TEST(Window, CosineSumsPeriodicAndSymmetric) {
  const double pi = std::numbers::pi;
  // Symmetric Hann of 5 is numpy.hanning(5): 0, 0.5, 1, 0.5, 0.
  const Tensor hann = window("HannWindow", Tensor::scalar<int64_t>(5), {{"periodic", Attribute::of_int(0)}});
  const std::vector<double> want = {0, 0.5, 1, 0.5, 0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(as_doubles(hann)[i], want[i], 1e-7);
  // Periodic Hamming of 8 in double: 25/46 - 21/46 cos(2 pi n / 8).
  const Tensor ham = window("HammingWindow", Tensor::scalar<int32_t>(8), {{"output_datatype", Attribute::of_int(11)}});
  ASSERT_EQ(ham.dtype(), DType::Float64);
  for (int n = 0; n < 8; ++n) EXPECT_DOUBLE_EQ(ham.data<double>()[n], 25.0 / 46 - 21.0 / 46 * std::cos(2 * pi * n / 8));
  // Symmetric Blackman of 6 (numpy.blackman(6)).
  const Tensor black = window("BlackmanWindow", Tensor::scalar<int64_t>(6), {{"periodic", Attribute::of_int(0)}});
  for (int n = 0; n < 6; ++n)
    EXPECT_NEAR(as_doubles(black)[static_cast<size_t>(n)],
                0.42 - 0.5 * std::cos(2 * pi * n / 5) + 0.08 * std::cos(4 * pi * n / 5), 1e-7);
  EXPECT_EQ(window("HannWindow", Tensor::scalar<int64_t>(0)).shape(), (Shape{0}));
}

TEST(Window, RefusesBadSizesAndTypes) {
  expect_error<InvalidArgument>([] { window("HannWindow", Tensor::scalar<int64_t>(-1)); }, "size -1 is negative");
  expect_error<Unsupported>([] { window("HannWindow", Tensor::scalar<float>(4)); }, "for int32/int64");
  expect_error<Unsupported>(
      [] {
        window("HannWindow", Tensor::scalar<int64_t>(4), {{"output_datatype", Attribute::of_int(7)}});
      },
      "output_datatype 7");
}

}  // namespace
}  // namespace kiln

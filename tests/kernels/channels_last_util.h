// Helpers of the layout pass's kernel tests (channels_last_test.cpp, channels_last_grad_test.cpp):
// the permutations between [N, C, H, W] and [N, H, W, C], a float32 comparison, a node moved to
// the ai.kiln domain under another op name, and a convolution case.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "kiln/kernel.h"

namespace kiln::test_util {

inline Tensor to_nhwc(const Tensor& t) { return t.permute({0, 2, 3, 1}).contiguous(); }
inline Tensor to_nchw(const Tensor& t) { return t.permute({0, 3, 1, 2}).contiguous(); }

inline void expect_near(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], tol) << what << " at " << i;
}

inline Node kiln_node(Node n, const std::string& op) {
  n.domain = kKilnDomain;
  n.op_type = op;
  return n;
}

struct ConvCase {
  std::string name;
  Shape x, w;
  std::map<std::string, Attribute> attrs;
};

}  // namespace kiln::test_util

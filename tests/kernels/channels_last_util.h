// Helpers of the layout pass's kernel tests (channels_last_test.cpp, channels_last_grad_test.cpp):
// the permutations between [N, C, H, W] and [N, H, W, C], a float32 comparison, a node moved to
// the ai.kiln domain under another op name, a convolution case and the pooling cases.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

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

// MaxPool and AveragePool: strides, pads, ceil_mode, dilations and count_include_pad.
using PoolCase = std::pair<std::string, std::map<std::string, Attribute>>;
inline std::vector<PoolCase> pool_cases() {
  using A = Attribute;
  return {
      {"MaxPool",
       {{"kernel_shape", A::of_ints({3, 3})}, {"strides", A::of_ints({2, 2})}, {"pads", A::of_ints({1, 1, 1, 1})}}},
      {"MaxPool",
       {{"kernel_shape", A::of_ints({2, 3})}, {"ceil_mode", A::of_int(1)}, {"dilations", A::of_ints({2, 1})}}},
      {"AveragePool", {{"kernel_shape", A::of_ints({3, 3})}, {"pads", A::of_ints({1, 1, 1, 1})}}},
      {"AveragePool",
       {{"kernel_shape", A::of_ints({3, 3})}, {"pads", A::of_ints({1, 1, 1, 1})}, {"count_include_pad", A::of_int(1)}}},
      {"AveragePool",
       {{"kernel_shape", A::of_ints({2, 2})}, {"strides", A::of_ints({2, 2})}, {"ceil_mode", A::of_int(1)}}},
  };
}

}  // namespace kiln::test_util

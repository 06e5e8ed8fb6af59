// Shared by the math families' gradient tests: a one-node builder and the float64 + float32 check.
#pragma once

#include <map>
#include <string>

#include "autodiff/gradient_checker.h"

namespace kiln::testing::math {

inline Node op(const std::string& type, size_t n_in, size_t n_out = 1, std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.op_type = type;
  for (size_t i = 0; i < n_in; ++i) n.inputs.push_back("in");
  for (size_t i = 0; i < n_out; ++i) n.outputs.push_back("out");
  n.attrs = std::move(attrs);
  return n;
}

inline Tensor ints(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v); }

// Float64 (relative error <= 1e-6), then float32 (<= 1e-3).
inline void both(GradCheck c) {
  check_gradient(c);
  c.float32 = true;
  check_gradient(c);
}

}  // namespace kiln::testing::math

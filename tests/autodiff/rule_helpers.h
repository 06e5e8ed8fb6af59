// Shared by the gradient-rule tests: one-node builders, small tensor/attribute factories and the
// float64 + float32 finite-difference check. The indexing, data-movement and loss tests describe a
// node by its input tensors (an undefined one marks an omitted optional input), hence their own
// sub-namespace with a node() builder and a both() that takes the op directly.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "autodiff/gradient_checker.h"

namespace kiln::testing {

// A node with n_in inputs and n_out outputs (all named alike: the checker binds them by position).
inline Node op(const std::string& type, size_t n_in, size_t n_out = 1, std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.op_type = type;
  for (size_t i = 0; i < n_in; ++i) n.inputs.push_back("in");
  for (size_t i = 0; i < n_out; ++i) n.outputs.push_back("out");
  n.attrs = std::move(attrs);
  return n;
}

// An int64 tensor of `shape`, or 1-D when no shape is given.
inline Tensor ints(std::vector<int64_t> v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return Tensor::from_vector<int64_t>(shape, v);
}

inline Tensor floats(std::vector<double> v) { return Tensor::from_vector<double>({static_cast<int64_t>(v.size())}, v); }

// Float64 (relative error <= 1e-6), then float32 (<= 1e-3).
inline void both(GradCheck c) {
  check_gradient(c);
  c.float32 = true;
  check_gradient(c);
}

}  // namespace kiln::testing

namespace kiln::testing::indexing {

// A node with the given inputs: an undefined tensor in `inputs` marks an omitted optional input.
inline Node node(const std::string& type, const std::vector<Tensor>& inputs,
                 std::map<std::string, Attribute> attrs = {}, size_t n_out = 1) {
  Node n;
  n.op_type = type;
  for (const Tensor& t : inputs) n.inputs.push_back(t.defined() ? "in" : "");
  for (size_t i = 0; i < n_out; ++i) n.outputs.push_back("out");
  n.attrs = std::move(attrs);
  return n;
}

inline Attribute i(int64_t v) { return Attribute::of_int(v); }
inline Attribute s(std::string v) { return Attribute::of_string(std::move(v)); }

// Float64 (relative error <= 1e-6), then float32 (<= 1e-3), of a node built from `inputs`.
inline void both(const std::string& type, const std::vector<Tensor>& inputs, std::vector<size_t> wrt,
                 std::map<std::string, Attribute> attrs = {}, uint64_t seed = 1, int64_t opset = 17, size_t n_out = 1) {
  GradCheck c{node(type, inputs, std::move(attrs), n_out), inputs, std::move(wrt), opset, seed};
  testing::both(c);
}

}  // namespace kiln::testing::indexing

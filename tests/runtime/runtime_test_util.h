// Graph pieces for the runtime's tests, which run test-only kernels registered in their own
// domains ("test.kiln", "test.binding") so that they depend on nothing but the runtime.
#pragma once

#include <string>
#include <vector>

#include "kiln/graph.h"

namespace kiln::test {

// A node `op` of `domain` named after its first output.
inline Node domain_node(const std::string& domain, const std::string& op, std::vector<std::string> in,
                        std::vector<std::string> out) {
  Node n;
  n.op_type = op;
  n.domain = domain;
  n.name = out.at(0) + "_node";
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

// A float32 value with these dims; a negative dim is the symbolic "batch".
inline ValueInfo float_info(const std::string& name, const std::vector<int64_t>& dims) {
  ValueInfo v;
  v.name = name;
  v.has_type = v.has_shape = true;
  for (int64_t d : dims) v.dims.push_back(Dim{d, d < 0 ? "batch" : ""});
  return v;
}

}  // namespace kiln::test

// The one finite-difference checker every gradient test uses (as ORT's GradientChecker): a one-node
// graph, a loss L = sum_j sum(Y_j * R_j) with fixed random R_j, gradients from the GradientBuilder
// against central differences of L computed in float64.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/graph.h"

namespace kiln::testing {

struct GradCheck {
  Node node;                   // inputs/outputs are renamed by the checker
  std::vector<Tensor> inputs;  // float64 for differentiable inputs; any dtype for the others
  std::vector<size_t> wrt;     // indices of inputs to differentiate
  int64_t opset = 17;
  uint64_t seed = 1;
  // float64: relative error of the gradient (2-norm) at most 1e-6; float32 (inputs cast down and
  // the analytical gradient computed in float32): at most 1e-3.
  bool float32 = false;
};

// Returns the worst relative error over the wrt inputs; fails the current gtest (with the seed
// and the node printed) if it is above the tolerance.
double check_gradient(const GradCheck& check);

// Random float64 tensor with values in [lo, hi).
Tensor random_tensor(Shape shape, uint64_t seed, double lo = -1.0, double hi = 1.0);

}  // namespace kiln::testing

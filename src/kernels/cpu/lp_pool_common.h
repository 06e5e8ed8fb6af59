// What LpPool and its gradient (lp_pool.cpp, lp_pool_grad.cpp) share: reading p and checking the
// input's rank.
#pragma once

#include <string>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::lp {

// The node's p (2 by default); InvalidModel naming `op` unless it is positive.
double read_p(const Node& node, const char* op);

// The input must be [N, C, D1, ...] with 1 to `max_spatial` spatial dims.
void check_input(const char* op, const TensorMeta& x, size_t max_spatial);

}  // namespace kiln::lp

// What Session::run_with_binding keeps between calls: the plan it last used, with the input
// dtypes and shapes and the bound outputs it was planned for, so that the next call with the same
// signature goes straight to the kernels, and the sorted memory of the bound outputs.
#pragma once

#include <vector>

#include "kiln/session.h"
#include "runtime/execution_plan.h"

namespace kiln {

struct Session::BindingCache {
  ExecutionPlan* plan = nullptr;
  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
  std::vector<ValueKind> kinds;
  std::vector<bool> bound;
  std::vector<int> input_values;   // plan value of each graph input
  std::vector<int> output_values;  // plan value of each graph output
  BoundRanges ranges;
  RunBinding binding;  // refilled every call; keeps its capacity

  bool matches(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) const;
};

}  // namespace kiln

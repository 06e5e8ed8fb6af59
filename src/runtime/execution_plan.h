// ExecutionPlan: everything decided once per input signature — the kernels to call in order, the
// dtype and shape of every value, the values computed at plan time, and where each run-time value
// lives in the arena. Running a plan is then kernel calls over views of the arena.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/kernel.h"
#include "kiln/session.h"
#include "runtime/memory_plan.h"

namespace kiln {

struct PlannedValue {
  enum class Kind {
    Feed,      // a graph input, fed on every run
    Constant,  // initializer, Constant node or folded result: `meta.value` holds it
    Arena,     // computed at run time into the arena, at `buffer`'s offset
    Alias,     // the same bytes as value `alias_of`, reshaped
    Dynamic,   // computed at run time with a shape known only then: allocated per run
  };
  std::string name;
  Kind kind = Kind::Arena;
  TensorMeta meta;
  int buffer = -1;    // index into ExecutionPlan::buffers for Arena values
  int alias_of = -1;  // for Alias
};

struct PlanStep {
  size_t node = 0;  // index into the graph's nodes
  std::unique_ptr<Kernel> kernel;
  int64_t opset = 0;
  std::vector<int> inputs;   // value indices, -1 for an omitted input
  std::vector<int> outputs;  // value indices (every output the kernel writes)
  bool dynamic = false;      // infer + allocate at run time
  bool alias_only = false;   // outputs are views of input 0: nothing to compute
};

class ExecutionPlan {
 public:
  std::vector<PlannedValue> values;
  std::unordered_map<std::string, int> index;  // value name -> values index
  std::vector<PlanStep> steps;
  std::vector<BufferRequest> buffers;
  MemoryPlan memory;
  std::shared_ptr<Storage> arena;
  PlanStats stats;
};

// Builds the plan for a model and the feeds of one run (their dtypes and shapes).
std::unique_ptr<ExecutionPlan> build_plan(const Model& model, const std::vector<size_t>& order,
                                          const std::map<std::string, Tensor>& feeds);

// Runs a plan; returns the requested outputs as tensors that own their memory.
// With `profile`, adds each step's kernel time to the entry of its op type.
std::map<std::string, Tensor> execute_plan(ExecutionPlan& plan, const Model& model,
                                           const std::map<std::string, Tensor>& feeds,
                                           const std::vector<std::string>& outputs,
                                           std::map<std::string, OpProfile>* profile = nullptr,
                                           uint64_t run_index = 0);

}  // namespace kiln

// ExecutionPlan: everything decided once per input signature — the kernels to call in order, the
// dtype and shape of every value, the values computed at plan time, and where each run-time value
// lives in the arena. Running a plan is then kernel calls over views of the arena.
#pragma once

#include <functional>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
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
    Bound,     // a graph output the caller binds: its step writes into the caller's tensor
  };
  std::string name;
  Kind kind = Kind::Arena;
  TensorMeta meta;
  int buffer = -1;    // index into ExecutionPlan::buffers for Arena values
  int alias_of = -1;  // for Alias
  int producer = -1;  // the step that writes it (index into steps), -1 for sources and folded values
  int producer_output = -1;
  int last_reader = -1;  // the last step that reads it; kReadAfterRun for graph outputs
};

inline constexpr int kReadAfterRun = std::numeric_limits<int>::max();

struct PlanStep {
  size_t node = 0;  // index into the graph's nodes
  std::unique_ptr<Kernel> kernel;
  const KernelDef* def = nullptr;  // what `kernel` came from (a dynamic step checks it against its inputs)
  int64_t opset = 0;
  std::vector<int> inputs;                // value indices, -1 for an omitted input
  std::vector<int> outputs;               // value indices (every output the kernel writes)
  bool dynamic = false;                   // infer + allocate at run time
  bool alias_only = false;                // outputs are views of input 0: nothing to compute
  std::vector<const Tensor*> input_ptrs;  // the executor's ComputeContext lists, kept between runs
  std::vector<Tensor*> output_ptrs;
};

// `t` itself when contiguous, else a packed copy kept in `packed` (a list: earlier pointers stay
// valid, and nothing is allocated while every feed is contiguous, as they usually are).
inline const Tensor* contiguous_feed(const Tensor& t, std::list<Tensor>& packed) {
  return t.is_contiguous() ? &t : &packed.emplace_back(t.contiguous());
}

// The tensors of one run, by value index: `at[i]` is the caller's (feeds, bound outputs), the
// plan's (constants) or `own[i]` (arena views, values computed at run time).
struct RunValues {
  std::vector<Tensor> own;
  std::vector<Tensor*> at;
  Tensor& operator[](int i) const { return *at[static_cast<size_t>(i)]; }
  void set(int i, Tensor t) {
    own[static_cast<size_t>(i)] = std::move(t);
    at[static_cast<size_t>(i)] = &own[static_cast<size_t>(i)];
  }
  // Drops the run's tensors (the vectors keep their capacity for the next run).
  void release() {
    for (Tensor& t : own) t = Tensor();
  }
};

class ExecutionPlan {
 public:
  std::vector<PlannedValue> values;
  std::unordered_map<std::string, int> index;  // value name -> values index
  std::vector<PlanStep> steps;
  std::vector<BufferRequest> buffers;
  MemoryPlan memory;
  std::shared_ptr<Storage> arena;  // allocated by the first run: planning alone allocates nothing
  PlanStats stats;
  RunValues run_values;  // the executor's table, kept between runs (a Session runs one call at a time)
};

// Places the arena's buffers: plan_memory, or a plan cache's stored plan (runtime/plan_cache.h).
using MemoryPlacer = std::function<MemoryPlan(const std::vector<BufferRequest>&)>;

// Builds the plan for a model and the feeds of one run (their dtypes and shapes). Graph outputs
// named in `bound` are written by their step straight into a tensor the caller binds at run time.
// `place` (empty: plan_memory) places the buffers once every step is planned.
std::unique_ptr<ExecutionPlan> build_plan(const Model& model, const std::vector<size_t>& order,
                                          const std::map<std::string, TensorMeta>& feeds,
                                          const std::set<std::string>& bound = {}, const MemoryPlacer& place = {});

// The caller's tensors for one run, by value index: every feed (contiguous), and the bound
// outputs. They must outlive the run.
struct RunBinding {
  std::vector<std::pair<int, const Tensor*>> feeds;
  std::vector<std::pair<int, Tensor*>> outputs;
  // Optional: called with a bound output's position among `outputs` once it holds its value (by
  // the step writing it in place, else after the run); `ready_position[value]` is that position,
  // -1 for values no one waits for.
  const std::function<void(size_t)>* output_ready = nullptr;
  std::vector<int> ready_position;
};

// The memory of a run's bound outputs, sorted, from the last check; rebuilt when it changes.
struct MemoryRange {
  const char* begin = nullptr;
  const char* end = nullptr;
  int value = -1;
  bool operator==(const MemoryRange& o) const { return begin == o.begin && end == o.end && value == o.value; }
};
struct BoundRanges {
  std::vector<MemoryRange> in_order;  // as bound
  std::vector<MemoryRange> sorted;    // by address
};

// Checks that bound outputs sharing memory with a feed or with each other are safe: an output
// may take over exactly the memory of an input of its own step whose kernel allows it
// (Kernel::output_may_overwrite) and that no later step reads. Throws InvalidArgument otherwise.
void check_binding_overlaps(const ExecutionPlan& plan, const Model& model, const RunBinding& binding,
                            BoundRanges& ranges);

// Runs a plan, leaving every value of the run in `values` (arena values are views of the arena,
// which the next run reuses). Bound outputs are written into the caller's tensors. With
// `profile`, adds each step's kernel time to the entries of its op type and of its node.
void execute_plan(ExecutionPlan& plan, const Model& model, const RunBinding& binding, RunValues& values,
                  RunProfile* profile = nullptr, uint64_t run_index = 0);

}  // namespace kiln

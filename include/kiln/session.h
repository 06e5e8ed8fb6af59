// Session: runs a model. It plans once per input signature (dtypes and shapes of the feeds):
// topological order, static shapes, constant folding, chosen kernels and a memory plan that reuses
// buffers by liveness. Running is then kernel calls over planned buffers.
//
//   kiln::Session s(kiln::load_model("net.onnx"));
//   auto out = s.run({{"input", x}});                    // std::map<std::string, Tensor>
//   std::cout << s.last_plan_stats().peak_bytes << "\n";
//
// A Session may be called from several threads: its calls are serialised (plans own their
// buffers), so concurrent runs are correct and take turns.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/kernel.h"
#include "kiln/tensor.h"

namespace kiln {

struct SessionOptions {
  int num_threads = 0;   // 0: all cores
  bool profile = false;  // time every kernel call (see Session::profile())
  // Rewrite chains of standard ops into Kiln's fused ops before planning (GELU, attention, ...:
  // ir/fusion.h), and hold convolutional networks' activations channels last between their
  // convolutions (the layout pass); a chain whose intermediate values the graph returns or reads
  // elsewhere stays as it is.
  bool fuse = true;
  // A folder for the plan cache (empty: none): the graph as fused and each input signature's memory
  // plan are stored there, and a later Session of the same model (same content, options, Kiln
  // version and library build) loads them instead of fusing and placing again. Shapes are still
  // inferred and kernels prepared; a stale or corrupt entry is ignored with a warning on stderr.
  // The Trainer sets it to the IPUConfig's executable_cache_dir.
  std::string plan_cache_dir;
};

// Time spent per op type over the runs of a profiling session, largest first.
struct OpProfile {
  std::string op_type;
  int64_t calls = 0;
  double total_ms = 0;
};

// Time spent in one node over the runs of a profiling session, largest first.
struct NodeProfile {
  std::string label;   // the node's name and op type
  std::string shapes;  // "[input shapes] -> [output shapes]" at its first profiled run
  int64_t calls = 0;
  double total_ms = 0;
};

// What a profiling session gathers: per op type and per node (keyed by the node's index).
struct RunProfile {
  std::map<std::string, OpProfile> ops;
  std::map<size_t, NodeProfile> nodes;
};

struct PlanStats {
  size_t peak_bytes = 0;                // size of the activation arena: the planned peak
  size_t unplanned_bytes = 0;           // bytes the arena would need without any reuse: every run-time value
                                        // in its own buffer (in-place outputs too), each 64-byte aligned
  size_t num_steps = 0;                 // kernels run per call
  size_t num_folded = 0;                // nodes computed at plan time
  size_t num_dynamic_steps = 0;         // steps whose shapes are known only at run time
  bool graph_from_cache = false;        // the Session's graph was loaded from the plan cache
  bool memory_plan_from_cache = false;  // and this plan's buffer offsets
};

// Sets the thread count for all kernels (OpenMP and oneDNN); 0 means all cores.
void set_num_threads(int n);
int get_num_threads();

class ExecutionPlan;
class PlanCache;

class Session {
 public:
  explicit Session(Model model, SessionOptions options = {});
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  const Model& model() const { return model_; }
  const std::vector<ValueInfo>& inputs() const { return model_.graph.inputs; }
  const std::vector<ValueInfo>& outputs() const { return model_.graph.outputs; }

  // Runs the graph. Every graph input must be fed (initializer-backed inputs may be); `outputs`
  // empty means all graph outputs. Throws InvalidArgument / ShapeError / TypeError naming the input.
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& feeds,
                                    const std::vector<std::string>& outputs = {});
  // Runs with inputs and outputs by position, in the order of inputs() and outputs(), as a loop
  // calling the same graph every step does (ONNX Runtime's IOBinding): no names, and no copies of
  // bound outputs. Every graph input is given. A defined tensor in `outputs` is bound: the step
  // that computes that output writes straight into its memory, which must have the output's dtype
  // and shape. It may be an input's memory when that input is read by that step only and its kernel
  // updates elementwise (the Optimizer binds each parameter's new value to the parameter itself);
  // any other overlap throws InvalidArgument. An undefined tensor in `outputs` is set to a new one.
  void run_with_binding(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs);
  // The same with the caller's tensors by pointer (none null), which a loop fills once: a call
  // with the signature of the previous one then copies no tensor handle and allocates nothing.
  void run_with_binding(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs);
  // The same, calling output_ready(i) as soon as bound output i holds its value: right after the
  // step that writes it in place, before the rest of the graph runs (data-parallel training starts
  // reducing a gradient then); after the run for the outputs no step writes in place.
  void run_with_binding(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
                        const std::function<void(size_t)>& output_ready);
  // Plans for the given feeds without running (used by inspection tools).
  PlanStats plan(const std::map<std::string, Tensor>& feeds);
  // Plans kept at once; planning an input signature beyond them drops the least recently used one.
  static constexpr size_t kMaxPlans = 8;
  size_t num_plans() const { return plans_.size(); }
  // The same from dtypes and shapes alone (`value` unused): no input, and no arena, is allocated,
  // so a plan for a batch that would not fit in memory still reports its size (kiln inspect).
  PlanStats plan_shapes(const std::map<std::string, TensorMeta>& feeds);
  // The same for a run_with_binding call that binds the graph outputs named in `bound` (the plan
  // such a call uses, which the plan cache then holds for it).
  PlanStats plan_shapes(const std::map<std::string, TensorMeta>& feeds, const std::set<std::string>& bound);
  const PlanStats& last_plan_stats() const;  // InvalidArgument before the first plan
  bool has_plan() const { return last_plan_ != nullptr; }
  // Plans for the feeds and returns the dtype and shape of every value known at plan time (values
  // whose shapes depend on run-time data are absent). Contents are not included.
  std::map<std::string, TensorMeta> value_metas(const std::map<std::string, Tensor>& feeds);
  // Per-op-type kernel time accumulated since construction (empty unless options.profile).
  std::vector<OpProfile> profile() const;
  // The same per node, largest first.
  std::vector<NodeProfile> node_profile() const;
  // Forgets the kernel time gathered so far (kiln run drops its warm-up run this way).
  void reset_profile();
  // Runs so far. Random kernels (Dropout) key their draws on the run index, so setting the count
  // back (a resumed training run) replays the same masks.
  uint64_t run_count() const { return runs_; }
  void set_run_count(uint64_t runs) { runs_ = runs; }

 private:
  struct BindingCache;
  static std::map<std::string, TensorMeta> metas_of(const std::map<std::string, Tensor>& feeds);
  ExecutionPlan& plan_for(const std::map<std::string, TensorMeta>& feeds, const std::set<std::string>& bound = {});
  void use_thread_setting() const;
  void evict_least_recent_plan();
  void plan_binding(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs);
  Model model_;
  SessionOptions options_;
  std::vector<size_t> order_;
  // Plans by signature, the least recently used evicted beyond kMaxPlans (each holds an arena once
  // run: a loop over batches padded to their longest item must not keep one arena per length).
  struct CachedPlan {
    std::unique_ptr<ExecutionPlan> plan;
    uint64_t last_use = 0;
  };
  std::map<std::string, CachedPlan> plans_;
  uint64_t plan_uses_ = 0;
  ExecutionPlan* last_plan_ = nullptr;
  RunProfile profile_;
  uint64_t runs_ = 0;
  std::unique_ptr<BindingCache> binding_;
  std::unique_ptr<PlanCache> plan_cache_;  // SessionOptions::plan_cache_dir
  bool graph_from_cache_ = false;
  std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();  // a pointer: Sessions move
};

}  // namespace kiln

#include "kiln/session.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <optional>
#include <set>

#include "ir/fusion.h"
#include "ir/subgraph.h"
#include "kernels/subgraph_runner.h"
#include "runtime/execution_plan.h"
#include "runtime/plan_cache.h"
#include "runtime/session_binding.h"

namespace kiln {

void set_num_threads(int n) {
  if (n < 0) throw InvalidArgument(fmt::format("thread count must be 0 (all cores) or positive, got {}", n));
  omp_set_num_threads(n == 0 ? omp_get_num_procs() : n);
}

int get_num_threads() { return omp_get_max_threads(); }

Session::Session(Model model, SessionOptions options) : model_(std::move(model)), options_(std::move(options)) {
  if (options_.num_threads != 0) set_num_threads(options_.num_threads);
  if (!options_.plan_cache_dir.empty()) plan_cache_ = PlanCache::open(options_.plan_cache_dir, model_, options_.fuse);
  if (plan_cache_) {
    if (std::optional<Model> planned = plan_cache_->load_graph(model_)) {
      model_ = std::move(*planned);
      graph_from_cache_ = true;
    }
  }
  if (!graph_from_cache_) {
    std::map<std::string, Tensor> given;  // the initializers as given (handles: the bytes are shared)
    if (plan_cache_) given = model_.graph.initializers;
    lift_captures(model_.graph);  // subgraphs' reads of outer values become node inputs
    if (options_.fuse) fuse(model_);
    if (plan_cache_) plan_cache_->store_graph(model_, given);
  }
  order_ = model_.graph.topological_order();
}

Session::~Session() = default;

namespace {

// The kernels of If, Loop and Scan run their subgraphs as Sessions (kernels/subgraph_runner.h).
class SessionRunner final : public SubgraphRunner {
 public:
  explicit SessionRunner(Model model) : session_(std::move(model)) {}
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& feeds) override { return session_.run(feeds); }

 private:
  Session session_;
};

const bool session_runner_registered = [] {
  set_subgraph_runner_factory(
      [](Model model) -> std::unique_ptr<SubgraphRunner> { return std::make_unique<SessionRunner>(std::move(model)); });
  return true;
}();

}  // namespace
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

namespace {

std::string signature(const std::map<std::string, TensorMeta>& feeds) {
  std::string key;
  for (const auto& [name, m] : feeds) key += name + ":" + m.describe() + ";";
  return key;
}

std::string input_list(const Graph& g) {
  std::vector<std::string> names;
  for (const auto& v : g.inputs) names.push_back(fmt::format("'{}' {}", v.name, v.describe()));
  return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
}

void check_feeds(const Model& model, const std::map<std::string, TensorMeta>& feeds) {
  const Graph& g = model.graph;
  for (const auto& [name, t] : feeds) {
    const ValueInfo* info = nullptr;
    for (const auto* list : {&g.inputs, &g.overridable_initializers})
      for (const ValueInfo& v : *list)
        if (v.name == name) info = &v;
    if (info == nullptr)
      throw InvalidArgument(fmt::format("'{}' is not an input of the model; its inputs are {}", name, input_list(g)));
    // A declared sequence or optional is checked even where its elements' type is not given; an
    // untyped input (a subgraph's, whose callers decide) takes any value.
    if ((info->has_type || info->kind != ValueKind::Tensor) && !value_kind_fits(info->kind, t.kind))
      throw TypeError(fmt::format("input '{}' expects {} but was given {}", name, info->describe(), t.describe()));
    if (info->has_type && info->dtype != t.dtype)
      throw TypeError(fmt::format("input '{}' expects {} but was given {}", name, info->describe(), t.describe()));
    if (t.kind == ValueKind::Tensor && !info->matches(t.shape))
      throw ShapeError(
          fmt::format("input '{}' expects shape {} but was given {}", name, info->describe(), t.describe()));
  }
  for (const ValueInfo& v : g.inputs)
    if (!feeds.count(v.name))
      throw InvalidArgument(
          fmt::format("input '{}' ({}) is missing; the model's inputs are {}", v.name, v.describe(), input_list(g)));
}

}  // namespace

std::map<std::string, TensorMeta> Session::metas_of(const std::map<std::string, Tensor>& feeds) {
  std::map<std::string, TensorMeta> metas;
  for (const auto& [name, t] : feeds) {
    if (!t.defined()) throw InvalidArgument(fmt::format("input '{}' is fed an undefined tensor", name));
    metas.emplace(name, TensorMeta::of(t));
  }
  return metas;
}

ExecutionPlan& Session::plan_for(const std::map<std::string, TensorMeta>& feeds, const std::set<std::string>& bound) {
  check_feeds(model_, feeds);
  std::string key = signature(feeds);
  for (const auto& name : bound) key += "bound:" + name + ";";
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    bool placed_from_cache = false;
    MemoryPlacer place;
    if (plan_cache_)
      place = [&](const std::vector<BufferRequest>& requests) {
        if (std::optional<MemoryPlan> stored = plan_cache_->load_memory_plan(key, requests)) {
          placed_from_cache = true;
          return *std::move(stored);
        }
        MemoryPlan planned = plan_memory(requests);
        plan_cache_->store_memory_plan(key, requests, planned);
        return planned;
      };
    CachedPlan fresh{build_plan(model_, order_, feeds, bound, place), 0};
    fresh.plan->stats.graph_from_cache = graph_from_cache_;
    fresh.plan->stats.memory_plan_from_cache = placed_from_cache;
    if (plans_.size() >= kMaxPlans) evict_least_recent_plan();
    it = plans_.emplace(key, std::move(fresh)).first;
  }
  it->second.last_use = ++plan_uses_;
  last_plan_ = it->second.plan.get();
  return *last_plan_;
}

void Session::evict_least_recent_plan() {
  auto oldest = std::min_element(plans_.begin(), plans_.end(),
                                 [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
  if (oldest == plans_.end()) return;
  const ExecutionPlan* gone = oldest->second.plan.get();
  if (binding_ && binding_->plan == gone) binding_->plan = nullptr;
  if (last_plan_ == gone) last_plan_ = nullptr;
  plans_.erase(oldest);
}

PlanStats Session::plan(const std::map<std::string, Tensor>& feeds) {
  const std::lock_guard lock(*mutex_);
  return plan_for(metas_of(feeds)).stats;
}

PlanStats Session::plan_shapes(const std::map<std::string, TensorMeta>& feeds) {
  const std::lock_guard lock(*mutex_);
  return plan_for(feeds).stats;
}

PlanStats Session::plan_shapes(const std::map<std::string, TensorMeta>& feeds, const std::set<std::string>& bound) {
  const std::lock_guard lock(*mutex_);
  return plan_for(feeds, bound).stats;
}

std::map<std::string, TensorMeta> Session::value_metas(const std::map<std::string, Tensor>& feeds) {
  const std::lock_guard lock(*mutex_);
  const ExecutionPlan& plan = plan_for(metas_of(feeds));
  std::map<std::string, TensorMeta> out;
  for (const PlannedValue& v : plan.values) {
    if (v.meta.dynamic) continue;
    out[v.name] = TensorMeta{v.meta.dtype, v.meta.shape, false, Tensor()};
  }
  return out;
}

const PlanStats& Session::last_plan_stats() const {
  if (last_plan_ == nullptr) throw InvalidArgument("the session has not planned a run yet");
  return last_plan_->stats;
}

std::map<std::string, Tensor> Session::run(const std::map<std::string, Tensor>& feeds,
                                           const std::vector<std::string>& outputs) {
  const std::lock_guard lock(*mutex_);  // one run at a time: plans own their buffers
  use_thread_setting();
  std::vector<std::string> wanted = outputs;
  if (wanted.empty())
    for (const auto& o : model_.graph.outputs) wanted.push_back(o.name);
  std::set<std::string> known;
  for (const auto& o : model_.graph.outputs) known.insert(o.name);
  for (const auto& name : wanted)
    if (!known.count(name)) throw InvalidArgument(fmt::format("'{}' is not an output of the model", name));
  ExecutionPlan& plan = plan_for(metas_of(feeds));
  std::list<Tensor> packed;
  RunBinding binding;
  for (const auto& [name, t] : feeds) binding.feeds.emplace_back(plan.index.at(name), contiguous_feed(t, packed));
  RunValues& values = plan.run_values;
  execute_plan(plan, model_, binding, values, options_.profile ? &profile_ : nullptr, runs_++);
  std::map<std::string, Tensor> result;
  // The arena and the feeds stay ours; outputs are the caller's.
  for (const std::string& name : wanted) result[name] = values[plan.index.at(name)].clone();
  values.release();
  return result;
}

void Session::use_thread_setting() const {
  if (options_.num_threads != 0 && get_num_threads() != options_.num_threads) set_num_threads(options_.num_threads);
}

namespace {

// A profile map's entries, the largest total first.
template <class Key, class Entry>
std::vector<Entry> slowest_first(const std::map<Key, Entry>& entries) {
  std::vector<Entry> out;
  out.reserve(entries.size());
  for (const auto& [key, e] : entries) out.push_back(e);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.total_ms > b.total_ms; });
  return out;
}

}  // namespace

std::vector<OpProfile> Session::profile() const {
  const std::lock_guard lock(*mutex_);
  return slowest_first(profile_.ops);
}

std::vector<NodeProfile> Session::node_profile() const {
  const std::lock_guard lock(*mutex_);
  return slowest_first(profile_.nodes);
}

void Session::reset_profile() {
  const std::lock_guard lock(*mutex_);
  profile_ = {};
}

}  // namespace kiln

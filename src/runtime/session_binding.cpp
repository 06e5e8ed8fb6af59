// Session::run_with_binding: the graph run by position with outputs written into the caller's
// tensors, for loops that call one graph every step (the Optimizer). After the first call with a
// signature, a call builds no names, copies no tensors and allocates nothing but its outputs.
#include "runtime/session_binding.h"

#include <fmt/format.h>

namespace kiln {

bool Session::BindingCache::matches(const std::vector<const Tensor*>& inputs,
                                    const std::vector<Tensor*>& outputs) const {
  if (plan == nullptr) return false;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i]->defined() || inputs[i]->dtype() != dtypes[i] || inputs[i]->shape() != shapes[i] ||
        inputs[i]->kind() != kinds[i])
      return false;
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i]->defined() != bound[i]) return false;
  return true;
}

void Session::run_with_binding(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) {
  std::vector<const Tensor*> in;
  std::vector<Tensor*> out;
  in.reserve(inputs.size());
  out.reserve(outputs.size());
  for (const Tensor& t : inputs) in.push_back(&t);
  for (Tensor& t : outputs) out.push_back(&t);
  run_with_binding(in, out);
}

void Session::plan_binding(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) {
  const Graph& g = model_.graph;
  BindingCache& cache = *binding_;
  std::map<std::string, TensorMeta> metas;
  std::set<std::string> bound;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]->defined())
      throw InvalidArgument(fmt::format("input '{}' is fed an undefined tensor", g.inputs[i].name));
    metas.emplace(g.inputs[i].name, TensorMeta::of(*inputs[i]));  // sequences and optionals: their kind
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i]->defined()) bound.insert(g.outputs[i].name);
  cache.plan = nullptr;  // until planning succeeds
  ExecutionPlan& plan = plan_for(metas, bound);
  cache.dtypes.clear();
  cache.shapes.clear();
  cache.kinds.clear();
  cache.input_values.clear();
  cache.output_values.clear();
  cache.bound.clear();
  for (const Tensor* t : inputs) {
    cache.dtypes.push_back(t->dtype());
    cache.shapes.push_back(t->shape());
    cache.kinds.push_back(t->kind());
  }
  for (const auto& v : g.inputs) cache.input_values.push_back(plan.index.at(v.name));
  for (size_t i = 0; i < outputs.size(); ++i) {
    cache.output_values.push_back(plan.index.at(g.outputs[i].name));
    cache.bound.push_back(outputs[i]->defined());
  }
  cache.plan = &plan;
}

void Session::run_with_binding(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs) {
  run_with_binding(inputs, outputs, std::function<void(size_t)>());
}

void Session::run_with_binding(const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
                               const std::function<void(size_t)>& output_ready) {
  const std::lock_guard lock(*mutex_);
  const Graph& g = model_.graph;
  if (inputs.size() != g.inputs.size())
    throw InvalidArgument(
        fmt::format("run_with_binding was given {} inputs; the model has {}", inputs.size(), g.inputs.size()));
  if (outputs.size() != g.outputs.size())
    throw InvalidArgument(
        fmt::format("run_with_binding was given {} outputs; the model has {}", outputs.size(), g.outputs.size()));
  for (size_t i = 0; i < inputs.size() || i < outputs.size(); ++i)
    if ((i < inputs.size() && inputs[i] == nullptr) || (i < outputs.size() && outputs[i] == nullptr))
      throw InvalidArgument("run_with_binding was given a null tensor pointer");
  use_thread_setting();
  if (!binding_) binding_ = std::make_unique<BindingCache>();
  BindingCache& cache = *binding_;
  if (!cache.matches(inputs, outputs)) plan_binding(inputs, outputs);
  ExecutionPlan& plan = *cache.plan;
  last_plan_ = &plan;
  std::list<Tensor> packed;
  RunBinding& binding = cache.binding;
  binding.feeds.clear();
  binding.outputs.clear();
  for (size_t i = 0; i < inputs.size(); ++i)
    binding.feeds.emplace_back(cache.input_values[i], contiguous_feed(*inputs[i], packed));
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i]->defined()) binding.outputs.emplace_back(cache.output_values[i], outputs[i]);
  check_binding_overlaps(plan, model_, binding, cache.ranges);
  // output_ready hears of the k-th bound output as the caller's position of it.
  std::vector<size_t> position_of_bound;
  std::function<void(size_t)> announce;
  binding.output_ready = nullptr;
  if (output_ready) {
    for (size_t i = 0; i < outputs.size(); ++i)
      if (outputs[i]->defined()) position_of_bound.push_back(i);
    binding.ready_position.assign(plan.values.size(), -1);
    for (size_t k = 0; k < binding.outputs.size(); ++k)
      binding.ready_position[static_cast<size_t>(binding.outputs[k].first)] = static_cast<int>(k);
    announce = [&](size_t k) { output_ready(position_of_bound[k]); };
    binding.output_ready = &announce;
  }
  RunValues& values = plan.run_values;
  execute_plan(plan, model_, binding, values, options_.profile ? &profile_ : nullptr, runs_++);
  for (size_t i = 0; i < outputs.size(); ++i)
    if (!outputs[i]->defined()) *outputs[i] = values[cache.output_values[i]].clone();
  values.release();
}

}  // namespace kiln

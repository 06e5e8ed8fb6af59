// Module::to_onnx / export_onnx (torch.onnx.export's role) and Module::operator() (running the
// traced graph in Kiln, with hooks and BatchNorm's running-statistics updates).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "kiln/error.h"
#include "kiln/nn/module.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "models/nn/generation.h"

namespace kiln::nn {

namespace {

std::vector<std::string> default_output_names(size_t n) {
  if (n == 1) return {"output"};
  std::vector<std::string> names;
  for (size_t i = 0; i < n; ++i) names.push_back(fmt::format("output{}", i));
  return names;
}

// Traces `root` over inputs of the given names, dtypes and shapes; declares the outputs.
void trace(Module& root, Tracer& t, const std::vector<std::string>& names, const std::vector<DType>& dtypes,
           const std::vector<std::vector<int64_t>>& shapes, const DynamicAxes& dynamic_axes,
           std::vector<std::string> output_names) {
  std::vector<Var> in;
  for (size_t i = 0; i < names.size(); ++i) {
    auto axes = dynamic_axes.find(names[i]);
    in.push_back(t.input(names[i], dtypes[i], shapes[i],
                         axes == dynamic_axes.end() ? std::map<int64_t, std::string>{} : axes->second));
  }
  const std::vector<Var> out = root.call(t, in);
  if (output_names.empty()) output_names = default_output_names(out.size());
  if (output_names.size() != out.size())
    throw InvalidArgument(fmt::format("{}: {} output names given ({}) for {} outputs of forward", root.type_name(),
                                      output_names.size(), fmt::join(output_names, ", "), out.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    auto axes = dynamic_axes.find(output_names[i]);
    t.output(out[i], output_names[i], axes == dynamic_axes.end() ? std::map<int64_t, std::string>{} : axes->second);
  }
}

}  // namespace

Model Module::to_onnx(const InputShapes& inputs, const DynamicAxes& dynamic_axes, const ExportOptions& options) {
  if (inputs.empty()) throw InvalidArgument(fmt::format("{}.to_onnx: no input shapes given", type_name()));
  if (!options.input_dtypes.empty() && options.input_dtypes.size() != inputs.size())
    throw InvalidArgument(fmt::format("{}.to_onnx: {} input dtypes for {} inputs", type_name(),
                                      options.input_dtypes.size(), inputs.size()));
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& [name, shape] : inputs) names.push_back(name), shapes.push_back(shape);
  std::vector<DType> dtypes = options.input_dtypes;
  if (dtypes.empty()) dtypes.assign(inputs.size(), DType::Float32);
  std::set<std::string> known(names.begin(), names.end());
  std::vector<std::string> outs = options.output_names;
  for (const auto& [name, axes] : dynamic_axes)
    if (!known.count(name) && std::find(outs.begin(), outs.end(), name) == outs.end() &&
        !(outs.empty() && (name == "output" || name.rfind("output", 0) == 0)))
      throw InvalidArgument(
          fmt::format("{}.to_onnx: dynamic_axes names '{}', which is neither an input ({}) nor an "
                      "output",
                      type_name(), name, fmt::join(names, ", ")));

  Tracer t(options.opset);
  trace(*this, t, names, dtypes, shapes, dynamic_axes, outs);
  Model m = t.finish();

  // Buffers are state, never trained: non-persistent ones (not in the state_dict) become constants;
  // persistent floating-point ones other than BatchNormalization statistics (which artifact
  // generation recognises) are listed as frozen with the frozen parameters.
  std::set<std::string> bn_statistics;
  for (const Node& n : m.graph.nodes)
    if (n.domain.empty() && n.op_type == "BatchNormalization")
      for (size_t i = 3; i < n.inputs.size() && i < 5; ++i) bn_statistics.insert(n.inputs[i]);
  std::vector<std::string> frozen;
  std::vector<Node> constants;
  for (const auto& [init, ref] : t.parameter_refs()) {
    const Slot* slot = ref.module->find_slot(ref.name);
    const std::string& name = ref.name;  // a lambda may not capture a structured binding in clang 14
    const bool is_parameter = std::any_of(ref.module->parameters_.begin(), ref.module->parameters_.end(),
                                          [&](const Slot& s) { return s.name == name; });
    if (is_parameter) {
      if (!slot->requires_grad) frozen.push_back(init);
    } else if (!slot->persistent) {
      Node c;
      c.op_type = "Constant";
      c.name = init + "/Constant";
      c.outputs = {init};
      c.attrs["value"] = Attribute::of_tensor(m.graph.initializers.at(init));
      constants.push_back(std::move(c));
      m.graph.initializers.erase(init);
    } else if (is_floating(slot->value.dtype()) && !bn_statistics.count(init)) {
      frozen.push_back(init);
    }
  }
  m.graph.nodes.insert(m.graph.nodes.begin(), constants.begin(), constants.end());
  if (!frozen.empty()) m.metadata["kiln.frozen_params"] = fmt::format("{}", fmt::join(frozen, ","));
  return m;
}

void Module::export_onnx(const std::string& path, const InputShapes& example_input_shapes,
                         const DynamicAxes& dynamic_axes, const ExportOptions& options) {
  save_model(to_onnx(example_input_shapes, dynamic_axes, options), path);
}

// ---- operator(): run in Kiln ----------------------------------------------------------------------

struct Module::RunCache {
  struct Plan {
    std::unique_ptr<Session> session;
    std::vector<std::string> inputs, outputs;
    std::vector<Tracer::ParameterRef> params;  // fed as graph inputs "<key>" each run
    std::vector<std::string> param_names;
    std::vector<Tracer::BufferUpdate> updates;
    std::vector<Tracer::Call> calls;  // of modules with hooks
  };
  // A run's values by name: its results, else its feeds; "" is an omitted optional value (torch's None).
  struct Values {
    const std::map<std::string, Tensor>& results;
    const std::map<std::string, Tensor>& feeds;
    const std::string& where;
    Tensor operator()(const std::string& name) const;
  };

  uint64_t generation = 0;
  uint64_t runs = 0;  // Dropout draws key on it: a retrace must not replay the masks
  std::map<std::string, std::shared_ptr<Plan>> plans;

  // The plan for these inputs in this mode, traced on first use (and again after any module changed).
  std::shared_ptr<Plan> plan_for(Module& root, const std::vector<Tensor>& inputs);
  static std::shared_ptr<Plan> make_plan(Module& root, const std::vector<Tensor>& inputs);
  static std::map<std::string, Tensor> feeds(const Plan& plan, const std::vector<Tensor>& inputs,
                                             const std::string& where);
  static void update_buffers(const Plan& plan, const Values& value);
  static void run_hooks(const Plan& plan, const Values& value);
};

namespace {
std::string signature(const std::vector<Tensor>& inputs, bool training) {
  std::string key = training ? "train" : "eval";
  for (const auto& t : inputs) key += "|" + t.describe();
  return key;
}
}  // namespace

Tensor Module::RunCache::Values::operator()(const std::string& name) const {
  if (name.empty()) return Tensor();
  if (auto it = results.find(name); it != results.end()) return it->second;
  if (auto it = feeds.find(name); it != feeds.end()) return it->second;
  throw InvalidArgument(fmt::format("{}: value '{}' was not computed", where, name));
}

std::shared_ptr<Module::RunCache::Plan> Module::RunCache::plan_for(Module& root, const std::vector<Tensor>& inputs) {
  if (generation != detail::generation()) {
    plans.clear();
    generation = detail::generation();
  }
  const std::string key = signature(inputs, root.training_);
  auto found = plans.find(key);
  if (found == plans.end()) found = plans.emplace(key, make_plan(root, inputs)).first;
  return found->second;
}

// Traces `root` over the inputs into a Session. Parameters become graph inputs, fed each run rather
// than baked in, so values changed in place are seen; the graph also outputs every value the buffer
// updates and the hooks read.
std::shared_ptr<Module::RunCache::Plan> Module::RunCache::make_plan(Module& root, const std::vector<Tensor>& inputs) {
  auto made = std::make_shared<Plan>();
  Plan& plan = *made;
  for (size_t i = 0; i < inputs.size(); ++i)
    plan.inputs.push_back(inputs.size() == 1 ? "input" : fmt::format("input{}", i));
  std::vector<DType> dtypes;
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& x : inputs) dtypes.push_back(x.dtype()), shapes.push_back(x.shape());
  Tracer t;
  trace(root, t, plan.inputs, dtypes, shapes, {}, {});
  Model m = t.finish();
  for (const auto& o : m.graph.outputs) plan.outputs.push_back(o.name);
  for (const auto& [init, ref] : t.parameter_refs()) {
    m.graph.inputs.push_back(ValueInfo::of(init, m.graph.initializers.at(init)));
    m.graph.initializers.erase(init);
    plan.param_names.push_back(init);
    plan.params.push_back(ref);
  }
  std::set<std::string> outputs(plan.outputs.begin(), plan.outputs.end()), graph_inputs;
  for (const auto& v : m.graph.inputs) graph_inputs.insert(v.name);
  auto request = [&](const std::string& name) {
    if (name.empty() || graph_inputs.count(name) || !outputs.insert(name).second) return;
    ValueInfo v;
    v.name = name;
    m.graph.outputs.push_back(v);
  };
  plan.updates = t.buffer_updates();
  for (const auto& u : plan.updates) request(u.value);
  for (const auto& c : t.calls()) {
    if (c.module->pre_hooks_.empty() && c.module->hooks_.empty()) continue;
    plan.calls.push_back(c);
    for (const auto& n : c.inputs) request(n);
    for (const auto& n : c.outputs) request(n);
  }
  plan.session = std::make_unique<Session>(std::move(m));
  return made;
}

// The inputs, and each parameter's current value.
std::map<std::string, Tensor> Module::RunCache::feeds(const Plan& plan, const std::vector<Tensor>& inputs,
                                                      const std::string& where) {
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) feeds[plan.inputs[i]] = inputs[i];
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const Slot* slot = plan.params[i].module->find_slot(plan.params[i].name);
    if (slot == nullptr)
      throw InvalidArgument(fmt::format("{}: parameter '{}' vanished since the trace", where, plan.param_names[i]));
    feeds[plan.param_names[i]] = slot->value;
  }
  return feeds;
}

// Running statistics (torch updates them during forward; here right after the run).
void Module::RunCache::update_buffers(const Plan& plan, const Values& value) {
  for (const auto& u : plan.updates) {
    Module& m = const_cast<Module&>(*u.module);
    Slot* slot = m.find_slot(u.name);
    Tensor fresh = value(u.value);
    if (fresh.shape() != slot->value.shape() || fresh.dtype() != slot->value.dtype())
      throw ShapeError(fmt::format("{}: the updated value of buffer '{}' is {}, the buffer is {}", m.type_name(),
                                   u.name, fresh.describe(), slot->value.describe()));
    slot->value.copy_from(fresh);
    if (u.count_batch)
      if (Slot* count = m.find_slot("num_batches_tracked");
          count && count->value.dtype() == DType::Int64 && count->value.numel() == 1 && count->value.is_contiguous())
        count->value.data<int64_t>()[0] += 1;
  }
}

// Hooks, in the order the calls started (pre-hooks) and ended (hooks).
void Module::RunCache::run_hooks(const Plan& plan, const Values& value) {
  struct Event {
    int64_t seq;
    const Tracer::Call* call;
    bool pre;
  };
  std::vector<Event> events;
  for (const auto& c : plan.calls) events.push_back({c.begin, &c, true}), events.push_back({c.end, &c, false});
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.seq < b.seq; });
  for (const Event& e : events) {
    Module& m = const_cast<Module&>(*e.call->module);
    std::vector<Tensor> in, out;
    for (const auto& n : e.call->inputs) in.push_back(value(n));
    if (e.pre) {
      auto hooks = m.pre_hooks_;  // a hook may remove itself
      for (auto& [id, h] : hooks) h(m, in);
    } else {
      for (const auto& n : e.call->outputs) out.push_back(value(n));
      auto hooks = m.hooks_;
      for (auto& [id, h] : hooks) h(m, in, out);
    }
  }
}

std::vector<Tensor> Module::operator()(const std::vector<Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].defined()) throw InvalidArgument(fmt::format("{}: input {} is an undefined tensor", type_name(), i));
  if (!run_cache_) run_cache_ = std::make_shared<RunCache>();
  RunCache& cache = *run_cache_;
  // Held here: a hook that changes the module (or runs it) may drop the cache's plans.
  const std::shared_ptr<RunCache::Plan> held = cache.plan_for(*this, inputs);
  const RunCache::Plan& plan = *held;
  const std::string where = type_name();
  const std::map<std::string, Tensor> feeds = RunCache::feeds(plan, inputs, where);
  plan.session->set_run_count(cache.runs++);
  const std::map<std::string, Tensor> results = plan.session->run(feeds);
  const RunCache::Values value{results, feeds, where};
  RunCache::update_buffers(plan, value);
  RunCache::run_hooks(plan, value);
  std::vector<Tensor> out;
  for (const auto& name : plan.outputs) out.push_back(results.at(name));
  return out;
}

}  // namespace kiln::nn

// Builds an ExecutionPlan: shape propagation through each kernel's infer(), constant folding of
// everything computable at plan time (initializer transforms, shape arithmetic), aliasing for
// view ops, in-place reuse for elementwise ops, and a liveness-based memory plan.
#include <fmt/format.h>

#include <limits>
#include <set>

#include "kernels/node_inference.h"
#include "runtime/execution_plan.h"

namespace kiln {

namespace {

constexpr size_t kForever = std::numeric_limits<size_t>::max();

struct Planner {
  const Model& model;
  const std::vector<size_t>& order;
  const std::map<std::string, TensorMeta>& feeds;
  const std::set<std::string>& bound;
  const MemoryPlacer& place;
  std::unique_ptr<ExecutionPlan> plan = std::make_unique<ExecutionPlan>();
  std::unordered_map<std::string, size_t> last_use;     // value name -> last topological position
  std::vector<size_t> step_pos;                         // each step's topological position
  std::unordered_map<size_t, int> runtime_view_buffer;  // a run-time view's value -> the buffer it views

  int add_value(PlannedValue v) {
    const int id = static_cast<int>(plan->values.size());
    plan->index[v.name] = id;
    plan->values.push_back(std::move(v));
    return id;
  }

  // Inputs whose elements a node never reads (their shape only): Shape's and Size's, SumToShapeOf's
  // target. Such a read does not keep the elements alive (trim_lifetimes does the same with the
  // kernels' reads_only_shape once they exist), so a dying input can still be written over in place.
  static bool reads_only_shape(const Node& n, size_t input) {
    if (n.domain.empty()) return n.op_type == "Shape" || n.op_type == "Size";
    return n.domain == kKilnDomain && n.op_type == "SumToShapeOf" && input == 1;
  }

  void compute_last_uses() {
    for (size_t pos = 0; pos < order.size(); ++pos) {
      const Node& n = model.graph.nodes[order[pos]];
      for (size_t k = 0; k < n.inputs.size(); ++k)
        if (!n.inputs[k].empty() && !reads_only_shape(n, k)) last_use[n.inputs[k]] = pos;
    }
    for (const auto& out : model.graph.outputs) last_use[out.name] = kForever;
  }

  size_t last_use_of(const std::string& name) const {
    auto it = last_use.find(name);
    return it == last_use.end() ? 0 : it->second;
  }

  void add_sources() {
    const Graph& g = model.graph;
    for (const auto& [name, t] : g.initializers) {
      PlannedValue v{name, PlannedValue::Kind::Constant, TensorMeta::of(t), -1, -1};
      v.meta.value = t.contiguous();
      add_value(std::move(v));
    }
    for (const auto& [name, meta] : feeds) {
      TensorMeta m{meta.dtype, meta.shape, meta.kind != ValueKind::Tensor, Tensor(), meta.kind};
      PlannedValue v{name, PlannedValue::Kind::Feed, std::move(m), -1, -1};
      auto it = plan->index.find(name);
      if (it != plan->index.end()) plan->values[static_cast<size_t>(it->second)] = std::move(v);  // overrides
      else add_value(std::move(v));
    }
  }

  // A new arena buffer for value `id`, written at topological position `pos`. Lifetimes are kept
  // in positions (folded nodes included), which orders steps the same way.
  void place_in_arena(int id, size_t pos) {
    PlannedValue& v = plan->values[static_cast<size_t>(id)];
    v.kind = PlannedValue::Kind::Arena;
    v.buffer = static_cast<int>(plan->buffers.size());
    const size_t bytes = static_cast<size_t>(numel(v.meta.shape)) * dtype_size(v.meta.dtype);
    plan->buffers.push_back({bytes, pos, std::max(pos, last_use_of(v.name))});
  }

  // The node's inputs as the planner knows them: value indices into the plan (-1: omitted) and
  // their metas.
  std::vector<std::optional<TensorMeta>> gather_inputs(const Node& node, PlanStep& step) {
    std::vector<std::optional<TensorMeta>> metas;
    for (const auto& in : node.inputs) {
      if (in.empty()) {
        step.inputs.push_back(-1);
        metas.emplace_back(std::nullopt);
        continue;
      }
      auto it = plan->index.find(in);
      if (it == plan->index.end())
        throw InvalidModel(
            fmt::format("{} reads '{}', which is not a graph input, an initializer or the "
                        "output of an earlier node",
                        node.label(), in));
      step.inputs.push_back(it->second);
      metas.emplace_back(plan->values[static_cast<size_t>(it->second)].meta);
    }
    return metas;
  }

  void plan_node(size_t pos) {
    const Node& node = model.graph.nodes[order[pos]];
    PlanStep step;
    step.node = order[pos];
    step.opset = model.opset(node.domain);
    std::vector<std::optional<TensorMeta>> inputs = gather_inputs(node, step);
    NodeInference inferred = infer_node(node, step.opset, inputs);
    step.kernel = std::move(inferred.kernel);
    step.def = inferred.def;
    switch (inferred.outcome) {
      case NodeInference::Outcome::Dynamic:  // shapes known only at run time: infer then
        step.dynamic = true;
        for (const auto& out : node.outputs) {
          PlannedValue v{out, PlannedValue::Kind::Dynamic, {}, -1, -1};
          v.meta.dynamic = true;
          step.outputs.push_back(add_value(std::move(v)));
        }
        if (step.kernel->output_aliases_input()) keep_source_of_runtime_view(step);
        ++plan->stats.num_dynamic_steps;
        plan->steps.push_back(std::move(step));
        step_pos.push_back(pos);
        return;
      case NodeInference::Outcome::Folded:  // nothing to do at run time
        for (size_t i = 0; i < node.outputs.size(); ++i)
          if (!node.outputs[i].empty())
            add_value({node.outputs[i], PlannedValue::Kind::Constant, inferred.outputs[i], -1, -1});
        ++plan->stats.num_folded;
        return;
      case NodeInference::Outcome::Runtime:
        break;
    }
    step.kernel->prepare(InferContext{node, step.opset, std::move(inputs)}, inferred.outputs);
    place_outputs(node, step, inferred.outputs, pos);
    plan->steps.push_back(std::move(step));
    step_pos.push_back(pos);
  }

  // A view made at run time (a Reshape to a shape known only then) reads its source's buffer for as
  // long as the view is read: no step may overwrite that buffer in place before.
  void keep_source_of_runtime_view(const PlanStep& step) {
    if (step.inputs.empty() || step.inputs[0] < 0 || step.outputs.empty()) return;
    const auto source = static_cast<size_t>(step.inputs[0]);
    const auto it = runtime_view_buffer.find(source);
    const int b = it != runtime_view_buffer.end() ? it->second : plan->values[source].buffer;
    if (b < 0) return;
    runtime_view_buffer[static_cast<size_t>(step.outputs[0])] = b;
    BufferRequest& r = plan->buffers[static_cast<size_t>(b)];
    r.last = std::max(r.last, last_use_of(plan->values[static_cast<size_t>(step.outputs[0])].name));
  }

  // Buffer lifetimes from the steps that run: the graph's readers counted nodes that were folded
  // at plan time (Shape of a known shape) and reads of a shape only (SumToShapeOf's target), which
  // would keep a forward activation alive through the whole backward for its shape alone. A buffer
  // now lives from its writer to the last step that reads its elements, through views of it: planned
  // ones share its buffer, and views made at run time are in runtime_view_buffer.
  void trim_lifetimes() {
    std::vector<int> buffer_of(plan->values.size());
    for (size_t v = 0; v < buffer_of.size(); ++v) buffer_of[v] = plan->values[v].buffer;
    for (const auto& [view, b] : runtime_view_buffer) buffer_of[view] = b;
    std::vector<size_t> last(plan->buffers.size());
    for (size_t b = 0; b < last.size(); ++b) last[b] = plan->buffers[b].first;
    for (size_t s = 0; s < plan->steps.size(); ++s) {
      const PlanStep& step = plan->steps[s];
      for (size_t k = 0; k < step.inputs.size(); ++k) {
        if (step.inputs[k] < 0 || step.kernel->reads_only_shape(k)) continue;
        const int b = buffer_of[static_cast<size_t>(step.inputs[k])];
        if (b >= 0) last[static_cast<size_t>(b)] = std::max(last[static_cast<size_t>(b)], step_pos[s]);
      }
    }
    for (const auto& out : model.graph.outputs) {
      const int b = buffer_of[static_cast<size_t>(plan->index.at(out.name))];
      if (b >= 0) last[static_cast<size_t>(b)] = kForever;
    }
    for (size_t b = 0; b < last.size(); ++b) plan->buffers[b].last = last[b];
  }

  // Values for the outputs of a step run at `pos`: arena buffers, a view or in-place buffer for
  // output 0 where the kernel allows it, per-run allocation for shapes known only then.
  void place_outputs(const Node& node, PlanStep& step, const std::vector<TensorMeta>& metas, size_t pos) {
    for (size_t i = 0; i < metas.size(); ++i) {
      const bool named = i < node.outputs.size() && !node.outputs[i].empty();
      const std::string name = named ? node.outputs[i] : fmt::format("{}::unused_output_{}", node.label(), i);
      TensorMeta m = metas[i];
      m.value = Tensor();
      if (!named && !m.dynamic && numel(m.shape) == 0) {  // an omitted output with no elements: one empty tensor
        m.value = Tensor::empty(m.dtype, m.shape);
        step.outputs.push_back(add_value({name, PlannedValue::Kind::Constant, m, -1, -1}));
        continue;
      }
      const int id = add_value({name, PlannedValue::Kind::Arena, m, -1, -1});
      step.outputs.push_back(id);
      if (m.dynamic || m.dtype == DType::String) {  // strings are objects, allocated per run, not arena bytes
        plan->values[static_cast<size_t>(id)].kind = PlannedValue::Kind::Dynamic;
        step.dynamic = true;
        continue;
      }
      if (named && bound.count(name)) {
        plan->values[static_cast<size_t>(id)].kind = PlannedValue::Kind::Bound;
        continue;
      }
      if (i == 0 && assign_shared_buffer(step, id, pos)) continue;
      place_in_arena(id, pos);
    }
    if (step.dynamic) ++plan->stats.num_dynamic_steps;
  }

  // Output 0 as a view of input 0 (Reshape & co.) or over a dying input (in-place elementwise).
  bool assign_shared_buffer(PlanStep& step, int out_id, size_t pos) {
    PlannedValue& out = plan->values[static_cast<size_t>(out_id)];
    if (step.kernel->output_aliases_input() && !step.inputs.empty() && step.inputs[0] >= 0) {
      const PlannedValue& in = plan->values[static_cast<size_t>(step.inputs[0])];
      if (in.kind == PlannedValue::Kind::Dynamic) return false;
      out.kind = PlannedValue::Kind::Alias;
      out.alias_of = step.inputs[0];
      out.buffer = in.buffer;
      if (in.buffer >= 0) {
        BufferRequest& b = plan->buffers[static_cast<size_t>(in.buffer)];
        b.last = std::max(b.last, last_use_of(out.name));
      }
      step.alias_only = true;
      return true;
    }
    const std::optional<size_t> inplace = step.kernel->inplace_input();
    if (!inplace || *inplace >= step.inputs.size() || step.inputs[*inplace] < 0) return false;
    // Over an arena buffer, or a planned view of one (a Reshape of it: the same bytes in the same
    // order); the same dtype and element count.
    const PlannedValue& in = plan->values[static_cast<size_t>(step.inputs[*inplace])];
    const bool arena = in.kind == PlannedValue::Kind::Arena || (in.kind == PlannedValue::Kind::Alias && in.buffer >= 0);
    if (!arena || in.meta.dtype != out.meta.dtype || numel(in.meta.shape) != numel(out.meta.shape)) return false;
    BufferRequest& b = plan->buffers[static_cast<size_t>(in.buffer)];
    if (b.last != pos) return false;  // still read later (or a graph output)
    out.buffer = in.buffer;
    b.last = std::max(pos, last_use_of(out.name));
    return true;
  }

  std::unique_ptr<ExecutionPlan> run() {
    compute_last_uses();
    add_sources();
    for (size_t pos = 0; pos < order.size(); ++pos) {
      const Node& node = model.graph.nodes[order[pos]];
      try {
        plan_node(pos);
      } catch (Error& e) {
        e.add_context(node.label() + ": ");
        throw;
      } catch (const std::exception& e) {
        throw Error(fmt::format("{}: {}", node.label(), e.what()));
      }
    }
    for (const auto& out : model.graph.outputs)
      if (!plan->index.count(out.name))
        throw InvalidModel(fmt::format("graph output '{}' is not produced by any node", out.name));
    trim_lifetimes();
    plan->memory = place ? place(plan->buffers) : plan_memory(plan->buffers);  // allocated by the first run
    plan->stats.peak_bytes = plan->memory.arena_bytes;
    // Without reuse (across lifetimes or in place) every run-time value would have its own buffer.
    for (const PlannedValue& v : plan->values)
      if (v.kind == PlannedValue::Kind::Arena)
        plan->stats.unplanned_bytes +=
            (static_cast<size_t>(numel(v.meta.shape)) * dtype_size(v.meta.dtype) + kAlignment - 1) / kAlignment *
            kAlignment;
    plan->stats.num_steps = plan->steps.size();
    record_producers_and_readers();
    return std::move(plan);
  }

  // Which step writes each value and which step reads it last; a view's readers count as readers
  // of what it views (for the checks of Session::run_with_binding).
  void record_producers_and_readers() {
    std::vector<PlannedValue>& values = plan->values;
    for (size_t s = 0; s < plan->steps.size(); ++s) {
      const PlanStep& step = plan->steps[s];
      for (size_t k = 0; k < step.outputs.size(); ++k) {
        values[static_cast<size_t>(step.outputs[k])].producer = static_cast<int>(s);
        values[static_cast<size_t>(step.outputs[k])].producer_output = static_cast<int>(k);
      }
      for (int in : step.inputs)
        if (in >= 0) values[static_cast<size_t>(in)].last_reader = static_cast<int>(s);
    }
    for (const auto& out : model.graph.outputs)
      values[static_cast<size_t>(plan->index.at(out.name))].last_reader = kReadAfterRun;
    for (auto s = plan->steps.rbegin(); s != plan->steps.rend(); ++s) {
      const bool view = s->alias_only || (s->dynamic && s->kernel->output_aliases_input());
      if (!view || s->inputs.empty() || s->inputs[0] < 0 || s->outputs.empty()) continue;
      int& source = values[static_cast<size_t>(s->inputs[0])].last_reader;
      source = std::max(source, values[static_cast<size_t>(s->outputs[0])].last_reader);
    }
  }
};

}  // namespace

std::unique_ptr<ExecutionPlan> build_plan(const Model& model, const std::vector<size_t>& order,
                                          const std::map<std::string, TensorMeta>& feeds,
                                          const std::set<std::string>& bound, const MemoryPlacer& place) {
  return Planner{model, order, feeds, bound, place}.run();
}

}  // namespace kiln

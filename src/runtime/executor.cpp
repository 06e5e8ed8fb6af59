// Runs an ExecutionPlan: points each value at its tensor (the caller's feeds and bound outputs,
// the plan's constants, views of the arena), calls each step's kernel, and leaves the values for
// the caller to read (the arena is reused by the next run). Nothing is copied in: a run of a plan
// whose values are all feeds, constants and bound outputs allocates nothing but the table.
#include <fmt/format.h>

#include <chrono>

#include "core/scratch.h"
#include "kernels/node_inference.h"
#include "runtime/execution_plan.h"

namespace kiln {

namespace {

void run_dynamic_step(PlanStep& step, const Node& node, RunValues& values, uint64_t run_index) {
  // The planned kernel was resolved for the dtypes planning could see; the inputs decide now.
  std::vector<std::optional<DType>> dtypes;
  for (int in : step.inputs) dtypes.push_back(in < 0 ? std::nullopt : std::optional<DType>(values[in].dtype()));
  const KernelDef& def = resolve_kernel(node, step.opset, dtypes);
  if (&def != step.def) {
    step.kernel = def.create(node);
    step.def = &def;
  }
  InferContext ictx{node, step.opset, {}};
  for (int in : step.inputs) {
    if (in < 0) {
      ictx.inputs.push_back(std::nullopt);
      continue;
    }
    TensorMeta m = TensorMeta::of(values[in]);
    m.value = values[in];  // data-dependent shapes may read the data
    ictx.inputs.push_back(std::move(m));
  }
  check_input_kinds(*step.kernel, node, ictx.inputs);
  std::vector<TensorMeta> metas = step.kernel->infer(ictx);
  check_string_outputs(step.def, node, metas);
  step.kernel->prepare(ictx, metas);
  ComputeContext cctx{node, {}, {}, run_index};
  for (int in : step.inputs) cctx.inputs.push_back(in < 0 ? nullptr : &values[in]);
  std::vector<Tensor> scratch(metas.size());
  for (size_t i = 0; i < metas.size(); ++i) {
    // A sequence or optional output is left undefined: the kernel assigns it.
    Tensor t = metas[i].kind == ValueKind::Tensor ? Tensor::empty(metas[i].dtype, metas[i].shape) : Tensor();
    if (i < step.outputs.size()) {
      values.set(step.outputs[i], t);
      cctx.outputs.push_back(&values[step.outputs[i]]);
    } else {
      scratch[i] = t;
      cctx.outputs.push_back(&scratch[i]);
    }
  }
  if (step.kernel->output_aliases_input() && cctx.inputs[0] != nullptr && !step.outputs.empty()) {
    const Tensor& in = *cctx.inputs[0];
    values.set(step.outputs[0], in.is_tensor() ? in.reshape(metas[0].shape) : in);
    return;
  }
  ScratchScope scope;
  step.kernel->compute(cctx);
}

void run_step(ExecutionPlan& plan, PlanStep& step, const Node& node, RunValues& values, uint64_t run_index) {
  if (step.dynamic) {
    run_dynamic_step(step, node, values, run_index);
    return;
  }
  if (step.alias_only) {
    const int out = step.outputs[0];
    values.set(out, values[step.inputs[0]].reshape(plan.values[static_cast<size_t>(out)].meta.shape));
    return;
  }
  // The step's pointer lists are refilled in place: no allocation after the first run.
  ComputeContext ctx{node, std::move(step.input_ptrs), std::move(step.output_ptrs), run_index};
  ctx.inputs.clear();
  for (int in : step.inputs) ctx.inputs.push_back(in < 0 ? nullptr : &values[in]);
  ctx.outputs.clear();
  for (int out : step.outputs) ctx.outputs.push_back(&values[out]);
  struct GiveBack {
    PlanStep& step;
    ComputeContext& ctx;
    ~GiveBack() {
      step.input_ptrs = std::move(ctx.inputs);
      step.output_ptrs = std::move(ctx.outputs);
    }
  } give_back{step, ctx};
  ScratchScope scope;
  step.kernel->compute(ctx);
}

// The caller's tensor for a Bound value: the planned dtype and shape, contiguous.
Tensor* checked_bound(const PlannedValue& v, Tensor* t) {
  if (t->dtype() != v.meta.dtype || t->shape() != v.meta.shape)
    throw ShapeError(fmt::format("output '{}' is {}{}, but the tensor bound to it is {}", v.name,
                                 dtype_name(v.meta.dtype), to_string(v.meta.shape), t->describe()));
  if (!t->is_contiguous())
    throw InvalidArgument(fmt::format("the tensor bound to output '{}' is not contiguous", v.name));
  return t;
}

void bind_values(ExecutionPlan& plan, const RunBinding& binding, RunValues& values) {
  if (!plan.arena) plan.arena = Storage::allocate(plan.memory.arena_bytes);
  values.own.resize(plan.values.size());  // released by the last run: nothing held
  values.at.assign(plan.values.size(), nullptr);
  for (size_t i = 0; i < plan.values.size(); ++i) {
    PlannedValue& v = plan.values[i];
    switch (v.kind) {
      case PlannedValue::Kind::Constant:
        values.at[i] = &v.meta.value;
        break;  // kernels do not write inputs
      case PlannedValue::Kind::Arena:
        values.set(static_cast<int>(i), Tensor::view_of(plan.arena, plan.memory.offsets[static_cast<size_t>(v.buffer)],
                                                        v.meta.dtype, v.meta.shape));
        break;
      case PlannedValue::Kind::Feed:   // from the binding, below
      case PlannedValue::Kind::Bound:  // from the binding, below
      case PlannedValue::Kind::Alias:
      case PlannedValue::Kind::Dynamic:
        values.at[i] = &values.own[i];
        break;  // set when their step runs
    }
  }
  for (const auto& [id, t] : binding.feeds) values.at[static_cast<size_t>(id)] = const_cast<Tensor*>(t);
  for (const auto& [id, t] : binding.outputs) {
    const PlannedValue& v = plan.values[static_cast<size_t>(id)];
    if (v.kind == PlannedValue::Kind::Bound) values.at[static_cast<size_t>(id)] = checked_bound(v, t);
  }
}

// Bound outputs that no step wrote in place (views, folded or dynamic values) are copied in.
void copy_to_bound_outputs(const ExecutionPlan& plan, const RunBinding& binding, const RunValues& values) {
  for (const auto& [id, t] : binding.outputs) {
    const PlannedValue& v = plan.values[static_cast<size_t>(id)];
    if (v.kind == PlannedValue::Kind::Bound) continue;
    const Tensor& value = values[id];
    if (!value.is_tensor()) {  // a sequence or optional: the handle itself (its lists never change)
      *t = value;
      continue;
    }
    if (t->dtype() != value.dtype() || t->shape() != value.shape())
      throw ShapeError(
          fmt::format("output '{}' is {}, but the tensor bound to it is {}", v.name, value.describe(), t->describe()));
    if (t->raw_data() != value.raw_data()) t->copy_from(value);
  }
}

// "[2, 3] [3] -> [2, 3]": the shapes a step ran on, for a per-node profile.
std::string step_shapes(const PlanStep& step, const RunValues& values) {
  const auto shapes = [&](const std::vector<int>& ids) {
    std::string out;
    for (const int id : ids)
      out += (out.empty() ? "" : " ") + (id < 0 ? std::string("-") : to_string(values[id].shape()));
    return out;
  };
  return shapes(step.inputs) + " -> " + shapes(step.outputs);
}

void add_to_profile(RunProfile& profile, const PlanStep& step, const Node& node, const RunValues& values, double ms) {
  const std::string op = node.domain.empty() ? node.op_type : node.domain + "." + node.op_type;
  OpProfile& p = profile.ops[op];
  p.op_type = op;
  ++p.calls;
  p.total_ms += ms;
  NodeProfile& n = profile.nodes[step.node];
  if (n.calls == 0) {
    n.label = node.label();
    n.shapes = step_shapes(step, values);
  }
  ++n.calls;
  n.total_ms += ms;
}

// Tells the caller which bound outputs this step wrote in place; returns how many.
size_t announce_written(const PlanStep& step, const ExecutionPlan& plan, const RunBinding& binding,
                        std::vector<bool>& announced) {
  size_t n = 0;
  for (const int out : step.outputs) {
    if (out < 0 || plan.values[static_cast<size_t>(out)].kind != PlannedValue::Kind::Bound) continue;
    const int position = binding.ready_position[static_cast<size_t>(out)];
    if (position < 0 || announced[static_cast<size_t>(position)]) continue;
    announced[static_cast<size_t>(position)] = true;
    (*binding.output_ready)(static_cast<size_t>(position));
    ++n;
  }
  return n;
}

void run_steps(ExecutionPlan& plan, const Model& model, const RunBinding& binding, RunValues& values,
               RunProfile* profile, uint64_t run_index) {
  std::vector<bool> announced(binding.output_ready ? binding.outputs.size() : 0, false);
  for (PlanStep& step : plan.steps) {
    const Node& node = model.graph.nodes[step.node];
    const auto start = profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    try {
      run_step(plan, step, node, values, run_index);
    } catch (Error& e) {
      e.add_context(node.label() + ": ");
      throw;
    } catch (const std::exception& e) {
      throw Error(fmt::format("{}: {}", node.label(), e.what()));
    }
    // Every step counts, dynamic (inference and allocation included) and view-only ones too, so
    // that a profile adds up to the run.
    if (profile)
      add_to_profile(*profile, step, node, values,
                     std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    if (binding.output_ready) announce_written(step, plan, binding, announced);
  }
  if (!binding.output_ready) return;
  copy_to_bound_outputs(plan, binding, values);
  for (size_t i = 0; i < announced.size(); ++i)
    if (!announced[i]) (*binding.output_ready)(i);
}

}  // namespace

void execute_plan(ExecutionPlan& plan, const Model& model, const RunBinding& binding, RunValues& values,
                  RunProfile* profile, uint64_t run_index) {
  bind_values(plan, binding, values);
  try {
    run_steps(plan, model, binding, values, profile, run_index);
    if (!binding.output_ready) copy_to_bound_outputs(plan, binding, values);
  } catch (...) {
    values.release();  // a failed run holds nothing
    throw;
  }
}

}  // namespace kiln

// Runs an ExecutionPlan: binds feeds, constants and arena views to values, calls each step's
// kernel, and hands back outputs that own their memory (the arena is reused by the next run).
#include <fmt/format.h>

#include <chrono>

#include "core/scratch.h"
#include "runtime/execution_plan.h"

namespace kiln {

namespace {

void run_dynamic_step(PlanStep& step, const Node& node, std::vector<Tensor>& live, uint64_t run_index) {
  InferContext ictx{node, step.opset, {}};
  for (int in : step.inputs) {
    if (in < 0) {
      ictx.inputs.push_back(std::nullopt);
      continue;
    }
    TensorMeta m = TensorMeta::of(live[static_cast<size_t>(in)]);
    m.value = live[static_cast<size_t>(in)];  // data-dependent shapes may read the data
    ictx.inputs.push_back(std::move(m));
  }
  std::vector<TensorMeta> metas = step.kernel->infer(ictx);
  step.kernel->prepare(ictx, metas);
  ComputeContext cctx{node, {}, {}, run_index};
  for (int in : step.inputs) cctx.inputs.push_back(in < 0 ? nullptr : &live[static_cast<size_t>(in)]);
  std::vector<Tensor> scratch(metas.size());
  for (size_t i = 0; i < metas.size(); ++i) {
    Tensor t = Tensor::empty(metas[i].dtype, metas[i].shape);
    if (i < step.outputs.size()) {
      live[static_cast<size_t>(step.outputs[i])] = t;
      cctx.outputs.push_back(&live[static_cast<size_t>(step.outputs[i])]);
    } else {
      scratch[i] = t;
      cctx.outputs.push_back(&scratch[i]);
    }
  }
  if (step.kernel->output_aliases_input() && cctx.inputs[0] != nullptr && !step.outputs.empty()) {
    live[static_cast<size_t>(step.outputs[0])] = cctx.inputs[0]->reshape(metas[0].shape);
    return;
  }
  ScratchScope scope;
  step.kernel->compute(cctx);
}

void run_step(ExecutionPlan& plan, PlanStep& step, const Node& node, std::vector<Tensor>& live, uint64_t run_index) {
  if (step.dynamic) {
    run_dynamic_step(step, node, live, run_index);
    return;
  }
  if (step.alias_only) {
    const size_t out = static_cast<size_t>(step.outputs[0]);
    live[out] = live[static_cast<size_t>(step.inputs[0])].reshape(plan.values[out].meta.shape);
    return;
  }
  ComputeContext ctx{node, {}, {}, run_index};
  ctx.inputs.reserve(step.inputs.size());
  for (int in : step.inputs) ctx.inputs.push_back(in < 0 ? nullptr : &live[static_cast<size_t>(in)]);
  ctx.outputs.reserve(step.outputs.size());
  for (int out : step.outputs) ctx.outputs.push_back(&live[static_cast<size_t>(out)]);
  ScratchScope scope;
  step.kernel->compute(ctx);
}

}  // namespace

std::map<std::string, Tensor> execute_plan(ExecutionPlan& plan, const Model& model,
                                           const std::map<std::string, Tensor>& feeds,
                                           const std::vector<std::string>& outputs,
                                           std::map<std::string, OpProfile>* profile, uint64_t run_index) {
  std::vector<Tensor> live(plan.values.size());
  for (size_t i = 0; i < plan.values.size(); ++i) {
    const PlannedValue& v = plan.values[i];
    switch (v.kind) {
      case PlannedValue::Kind::Feed: live[i] = feeds.at(v.name).contiguous(); break;
      case PlannedValue::Kind::Constant: live[i] = v.meta.value; break;
      case PlannedValue::Kind::Arena:
        live[i] = Tensor::view_of(plan.arena, plan.memory.offsets[static_cast<size_t>(v.buffer)], v.meta.dtype,
                                  v.meta.shape);
        break;
      case PlannedValue::Kind::Alias:
      case PlannedValue::Kind::Dynamic: break;  // bound when their step runs
    }
  }
  for (PlanStep& step : plan.steps) {
    const Node& node = model.graph.nodes[step.node];
    const auto start = profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    try {
      run_step(plan, step, node, live, run_index);
    } catch (Error& e) {
      e.add_context(node.label() + ": ");
      throw;
    } catch (const std::exception& e) {
      throw Error(fmt::format("{}: {}", node.label(), e.what()));
    }
    // Every step counts, dynamic (inference and allocation included) and view-only ones too, so
    // that a profile adds up to the run.
    if (profile) {
      const std::string op = node.domain.empty() ? node.op_type : node.domain + "." + node.op_type;
      OpProfile& p = (*profile)[op];
      p.op_type = op;
      ++p.calls;
      p.total_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
  }
  std::map<std::string, Tensor> result;
  for (const std::string& name : outputs) {
    const Tensor& t = live[static_cast<size_t>(plan.index.at(name))];
    result[name] = t.clone();  // the arena and the feeds stay ours; outputs are the caller's
  }
  return result;
}

}  // namespace kiln

// Checks a run's bound outputs against the memory of its feeds and of each other. Writing an
// output into an input's memory is what makes an optimizer step allocation-free, and is wrong in
// every other case: a later step would read the overwritten input, or a kernel would read
// elements it has already written.
#include <fmt/format.h>

#include <algorithm>

#include "runtime/execution_plan.h"

namespace kiln {

namespace {

using Range = MemoryRange;

Range range_of(const Tensor& t, int value) {
  const char* begin = static_cast<const char*>(t.raw_data());
  return {begin, begin + t.nbytes(), value};
}

// Output `out` written by its step over input `in` (same bytes): allowed when `in` is an input of
// that step whose kernel reads each element before writing it, and no later step reads `in`.
void check_overwrite(const ExecutionPlan& plan, const Model& model, const PlannedValue& out, const PlannedValue& in,
                     int in_id) {
  const PlanStep& step = plan.steps[static_cast<size_t>(out.producer)];
  const Node& node = model.graph.nodes[step.node];
  bool allowed = false;
  for (size_t i = 0; i < step.inputs.size(); ++i)
    if (step.inputs[i] == in_id && step.kernel->output_may_overwrite(static_cast<size_t>(out.producer_output), i))
      allowed = true;
  if (!allowed)
    throw InvalidArgument(
        fmt::format("output '{}' is bound to the memory of input '{}', but {} cannot write that "
                    "output over that input",
                    out.name, in.name, node.label()));
  if (in.last_reader > out.producer)
    throw InvalidArgument(
        fmt::format("output '{}' is bound to the memory of input '{}', which is still read after "
                    "{} writes it",
                    out.name, in.name, node.label()));
}

// The bound outputs' memory sorted by address, checked not to overlap; reused while unchanged.
const std::vector<Range>& sorted_outputs(const ExecutionPlan& plan, const RunBinding& binding, BoundRanges& ranges) {
  bool same = ranges.in_order.size() == binding.outputs.size();
  for (size_t i = 0; same && i < binding.outputs.size(); ++i)
    same = ranges.in_order[i] == range_of(*binding.outputs[i].second, binding.outputs[i].first);
  if (same) return ranges.sorted;
  ranges.in_order.clear();
  for (const auto& [id, t] : binding.outputs) ranges.in_order.push_back(range_of(*t, id));
  std::vector<Range>& outputs = ranges.sorted;
  outputs.clear();
  for (const Range& r : ranges.in_order)
    if (r.end > r.begin) outputs.push_back(r);
  std::sort(outputs.begin(), outputs.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < outputs.size(); ++i)
    if (outputs[i].begin < outputs[i - 1].end) {
      ranges.in_order.clear();  // not a checked state
      throw InvalidArgument(fmt::format("outputs '{}' and '{}' are bound to overlapping memory",
                                        plan.values[static_cast<size_t>(outputs[i - 1].value)].name,
                                        plan.values[static_cast<size_t>(outputs[i].value)].name));
    }
  return outputs;
}

}  // namespace

void check_binding_overlaps(const ExecutionPlan& plan, const Model& model, const RunBinding& binding,
                            BoundRanges& ranges) {
  const std::vector<Range>& outputs = sorted_outputs(plan, binding, ranges);
  for (const auto& [id, t] : binding.feeds) {
    if (t->nbytes() == 0) continue;
    const Range feed = range_of(*t, id);
    // The first bound output ending after the feed begins; outputs do not overlap one another.
    auto it = std::upper_bound(outputs.begin(), outputs.end(), feed.begin,
                               [](const char* p, const Range& r) { return p < r.end; });
    for (; it != outputs.end() && it->begin < feed.end; ++it) {
      const PlannedValue& out = plan.values[static_cast<size_t>(it->value)];
      const PlannedValue& in = plan.values[static_cast<size_t>(id)];
      if (out.kind != PlannedValue::Kind::Bound) continue;  // copied in after every step has run
      if (it->begin != feed.begin || it->end != feed.end)
        throw InvalidArgument(
            fmt::format("output '{}' is bound to memory that partly overlaps input '{}'", out.name, in.name));
      check_overwrite(plan, model, out, in, id);
    }
  }
}

}  // namespace kiln

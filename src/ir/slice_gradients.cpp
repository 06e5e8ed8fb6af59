// join_slice_gradients (fusion.h): the backward of a tensor split into slices (torch's chunk and
// split as Slices: nn.MultiheadAttention's packed q, k, v projection) is one ai.kiln.SliceGrad per
// slice, each writing zeros of the whole tensor and its part, and a Sum of them: k full-size
// tensors written and read for one. When constant bounds partition the axis, the parts side by
// side are the sum: a Concat; other bounds (computed at run time) make one ai.kiln.SliceGradSum.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ir/fusion.h"
#include "ir/fusion_rewrite.h"

namespace kiln {
namespace {

using fusion::kNone;
using fusion::Rewrite;
using fusion::Uses;

// One slice's gradient: dY and where it goes on the axis (the values, and the constants when they
// are; start and end -1 when not).
struct Part {
  size_t node = kNone, shape = kNone;            // the SliceGrad and the Shape it reads
  std::string dy, data, start_v, end_v, axis_v;  // its dY, the sliced tensor, its bounds and axis
  int64_t start = -1, end = -1;
};

// A one-element integer constant (an initializer or a Constant node).
std::optional<int64_t> int_constant(const Uses& uses, const std::string& v) {
  const auto values = uses.ints(v);
  return values && values->size() == 1 ? std::optional((*values)[0]) : std::nullopt;
}

// The SliceGrad writing `v` for the Sum at index `sum`, when that Sum is its only reader: one named
// axis, step 1, its shape the Shape of the sliced tensor.
std::optional<Part> part_of(const Graph& g, const Uses& uses, const std::string& v, size_t sum) {
  Part p;
  p.node = uses.producer_any(v);
  if (p.node == kNone || uses.sole_reader(v) != sum) return std::nullopt;
  const Node& n = g.nodes[p.node];
  if (n.domain != kKilnDomain || n.op_type != "SliceGrad" || n.inputs.size() < 5 || n.inputs[4].empty())
    return std::nullopt;
  if (n.inputs.size() > 5 && !n.inputs[5].empty() && int_constant(uses, n.inputs[5]) != 1) return std::nullopt;
  p.shape = uses.producer(n.inputs[1], "Shape");
  if (p.shape == kNone || g.nodes[p.shape].inputs.size() != 1 || !g.nodes[p.shape].attrs.empty()) return std::nullopt;
  p.dy = n.inputs[0];
  p.data = g.nodes[p.shape].inputs[0];
  p.start_v = n.inputs[2];
  p.end_v = n.inputs[3];
  p.axis_v = n.inputs[4];
  const auto start = int_constant(uses, p.start_v), end = int_constant(uses, p.end_v);
  if (start && end && *start >= 0 && *end > *start) {
    p.start = *start;
    p.end = *end;
  }
  return p;
}

constexpr int64_t kComputedAxis = std::numeric_limits<int64_t>::min();

// The parts' axis, when they slice one tensor on one axis (the same value, or equal constants):
// the constant, or kComputedAxis.
std::optional<int64_t> common_axis(const Uses& uses, const std::vector<Part>& parts) {
  const auto axis = int_constant(uses, parts[0].axis_v);
  for (const Part& p : parts) {
    if (p.data != parts[0].data) return std::nullopt;
    if (p.axis_v != parts[0].axis_v && (!axis || int_constant(uses, p.axis_v) != axis)) return std::nullopt;
  }
  return axis.value_or(kComputedAxis);
}

// Constant bounds side by side (sorted) from 0 to the axis's end: to the end, or to its extent by
// the hints.
bool partition(const Graph& g, const std::vector<Part>& parts, int64_t axis) {
  constexpr int64_t kToTheEnd = std::numeric_limits<int32_t>::max();  // torch writes INT64_MAX
  if (parts.front().start != 0 || axis == kComputedAxis) return false;
  for (size_t k = 1; k < parts.size(); ++k)
    if (parts[k].start < 0 || parts[k].start != parts[k - 1].end) return false;
  const int64_t end = parts.back().end;
  if (end >= kToTheEnd) return true;
  const auto h = fusion::hinted_info(g, parts[0].data);
  if (!h) return false;
  const int64_t rank = static_cast<int64_t>(h->dims.size());
  const int64_t a = axis < 0 ? axis + rank : axis;
  return a >= 0 && a < rank && h->dims[static_cast<size_t>(a)].value == end;
}

std::optional<Rewrite> match(const Graph& g, const Uses& uses, size_t i, GraphEditor& names) {
  const Node& sum = g.nodes[i];
  if (sum.inputs.size() < 2 || sum.outputs.size() != 1) return std::nullopt;
  std::vector<Part> parts;
  for (const std::string& v : sum.inputs) {
    auto p = part_of(g, uses, v, i);
    if (!p) return std::nullopt;
    parts.push_back(*p);
  }
  const auto axis = common_axis(uses, parts);
  if (!axis) return std::nullopt;
  std::vector<Part> sorted = parts;
  std::sort(sorted.begin(), sorted.end(), [](const Part& a, const Part& b) { return a.start < b.start; });
  Rewrite r;
  r.fused.outputs = sum.outputs;
  if (partition(g, sorted, *axis)) {
    r.fused.op_type = "Concat";
    r.fused.attrs["axis"] = Attribute::of_int(*axis);
    for (const Part& p : sorted) r.fused.inputs.push_back(p.dy);
  } else {  // the Sum's order: overlapping parts add as it adds them
    r.fused.domain = kKilnDomain;
    r.fused.op_type = "SliceGradSum";
    for (const Part& p : parts) r.fused.inputs.insert(r.fused.inputs.end(), {p.dy, p.start_v, p.end_v});
    r.fused.inputs.insert(r.fused.inputs.end(), {g.nodes[parts[0].node].inputs[1], parts[0].axis_v});
  }
  r.fused.name = names.fresh(fusion::renamed(sum.name, r.fused.op_type.c_str()));
  for (size_t k = 0; k < parts.size(); ++k) {
    r.nodes.push_back(parts[k].node);
    if (k > 0 || r.fused.op_type == "Concat")
      if (uses.sole_reader(g.nodes[parts[k].shape].outputs[0]) == parts[k].node) r.nodes.push_back(parts[k].shape);
  }
  r.nodes.push_back(i);
  return r;
}

}  // namespace

size_t join_slice_gradients(Model& model) {
  std::vector<Rewrite> rewrites = fusion::find_rewrites(
      model, [](const Node& n) { return n.domain.empty() && n.op_type == "Sum"; }, match);
  if (rewrites.empty()) return 0;
  fusion::apply(model, rewrites);
  return rewrites.size();
}

}  // namespace kiln

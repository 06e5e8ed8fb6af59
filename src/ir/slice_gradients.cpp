// join_slice_gradients (fusion.h): the backward of a tensor split into slices (torch's chunk and
// split as Slices: nn.MultiheadAttention's packed q, k, v projection) is one ai.kiln.SliceGrad per
// slice, each writing zeros of the whole tensor and its part, and a Sum of them: k full-size
// tensors written and read for one. When the slices partition an axis, the parts side by side are
// the sum: a Concat.
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

// One slice's gradient: dY and where it goes on the axis.
struct Part {
  size_t node = kNone, shape = kNone;  // the SliceGrad and the Shape it reads
  std::string dy, data;                // its dY and the sliced tensor
  int64_t axis = 0, start = 0, end = 0;
};

// A one-element integer constant (an initializer or a Constant node).
std::optional<int64_t> int_constant(const Graph& g, const Uses& uses, const std::string& v) {
  const Tensor* t = nullptr;
  if (const auto it = g.initializers.find(v); it != g.initializers.end()) t = &it->second;
  if (const size_t p = uses.producer(v, "Constant"); t == nullptr && p != kNone) {
    const auto a = g.nodes[p].attrs.find("value");
    if (a != g.nodes[p].attrs.end() && a->second.kind == Attribute::Kind::Tensor) t = &a->second.t;
  }
  if (t == nullptr || !t->defined() || t->numel() != 1) return std::nullopt;
  if (t->dtype() != DType::Int64 && t->dtype() != DType::Int32) return std::nullopt;
  return t->to_int64_vector()[0];
}

// The SliceGrad writing `v` for the Sum at index `sum`, when that Sum is its only reader: one axis,
// step 1, constant bounds, its shape the Shape of the sliced tensor.
std::optional<Part> part_of(const Graph& g, const Uses& uses, const std::string& v, size_t sum) {
  Part p;
  p.node = uses.producer_any(v);
  if (p.node == kNone || uses.sole_reader(v) != sum) return std::nullopt;
  const Node& n = g.nodes[p.node];
  if (n.domain != kKilnDomain || n.op_type != "SliceGrad" || n.inputs.size() < 5) return std::nullopt;
  if (n.inputs.size() > 5 && !n.inputs[5].empty() && int_constant(g, uses, n.inputs[5]) != 1) return std::nullopt;
  const auto start = int_constant(g, uses, n.inputs[2]), end = int_constant(g, uses, n.inputs[3]);
  const auto axis = int_constant(g, uses, n.inputs[4]);
  p.shape = uses.producer(n.inputs[1], "Shape");
  if (!start || !end || !axis || *start < 0 || *end <= *start || p.shape == kNone) return std::nullopt;
  const Node& shape = g.nodes[p.shape];
  if (shape.inputs.size() != 1 || !shape.attrs.empty()) return std::nullopt;
  p.dy = n.inputs[0];
  p.data = shape.inputs[0];
  p.axis = *axis;
  p.start = *start;
  p.end = *end;
  return p;
}

// The slices side by side from 0 to the axis's end: to the end, or to its extent by the hints.
bool partition(const Graph& g, const std::vector<Part>& parts) {
  constexpr int64_t kToTheEnd = std::numeric_limits<int32_t>::max();  // torch writes INT64_MAX
  if (parts.front().start != 0) return false;
  for (size_t k = 1; k < parts.size(); ++k) {
    const Part& p = parts[k];
    if (p.start != parts[k - 1].end || p.axis != parts[0].axis || p.data != parts[0].data) return false;
  }
  const int64_t end = parts.back().end;
  if (end >= kToTheEnd) return true;
  const auto h = fusion::hinted_info(g, parts[0].data);
  if (!h) return false;
  const int64_t rank = static_cast<int64_t>(h->dims.size());
  const int64_t axis = parts[0].axis < 0 ? parts[0].axis + rank : parts[0].axis;
  return axis >= 0 && axis < rank && h->dims[static_cast<size_t>(axis)].value == end;
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
  std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.start < b.start; });
  if (!partition(g, parts)) return std::nullopt;
  Rewrite r;
  r.fused.op_type = "Concat";
  r.fused.name = names.fresh(fusion::renamed(sum.name, "Concat"));
  r.fused.outputs = sum.outputs;
  r.fused.attrs["axis"] = Attribute::of_int(parts[0].axis);
  for (const Part& p : parts) {
    r.fused.inputs.push_back(p.dy);
    r.nodes.push_back(p.node);
    if (uses.sole_reader(g.nodes[p.shape].outputs[0]) == p.node) r.nodes.push_back(p.shape);
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

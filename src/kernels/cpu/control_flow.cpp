// Control flow: If (opset 1+), Loop (1+) and Scan (8, 9+). Each subgraph runs as its own Session
// (control_flow_common.h), planned once per input signature; the values a subgraph reads from the
// graphs around it arrive as the node's trailing inputs (lifted by the Session, ir/subgraph.h).
// Output shapes depend on the data (the branch taken, the trip count), so these nodes infer at run
// time: infer() reads the inputs' values and runs the subgraphs, compute() writes what they gave.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "ir/subgraph.h"
#include "kernels/cpu/control_flow_common.h"

namespace kiln::control {

const Graph& graph_attr(const Node& node, const char* key, const char* op) {
  const auto it = node.attrs.find(key);
  if (it == node.attrs.end() || it->second.kind != Attribute::Kind::Graph || !it->second.g)
    throw InvalidModel(fmt::format("{}: graph attribute '{}' is required", op, key));
  return *it->second.g;
}

std::vector<std::string> captures_of(const Node& node) {
  const auto it = node.attrs.find(kCapturesAttr);
  return it == node.attrs.end() ? std::vector<std::string>{} : it->second.strings;
}

Subgraph::Subgraph(const Graph& g, const std::vector<std::string>& captures, int64_t opset, std::string what)
    : what_(std::move(what)), captures_(captures) {
  Model m;
  m.graph = g;
  m.opsets[""] = opset;
  m.opsets[kKilnDomain] = 1;
  // Loop-carried values may change shape from one iteration to the next, and the node's inputs
  // decide the dtypes (the body's kernels check them): the declared input types are not enforced.
  for (ValueInfo& v : m.graph.inputs) {
    v.has_shape = false;
    v.has_type = false;
    v.kind = ValueKind::Tensor;  // untyped: a declared optional may be fed its value, or nothing
    inputs_.push_back(v.name);
  }
  for (ValueInfo& v : m.graph.outputs) {
    v.has_shape = false;
    outputs_.push_back(v.name);
    output_dtypes_.push_back(v.has_type ? v.dtype : DType::Float32);
  }
  for (const std::string& c : captures) m.graph.inputs.push_back(ValueInfo{c});
  session_ = make_subgraph_runner(std::move(m));
}

std::vector<Tensor> Subgraph::run(const std::vector<Tensor>& inputs, const std::vector<Tensor>& captures) {
  if (inputs.size() != inputs_.size())
    throw InvalidModel(fmt::format("{} takes {} inputs but is given {}", what_, inputs_.size(), inputs.size()));
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) feeds[inputs_[i]] = inputs[i];
  for (size_t i = 0; i < captures.size() && i < captures_.size(); ++i) feeds[captures_[i]] = captures[i];
  std::map<std::string, Tensor> out;
  try {
    out = session_->run(feeds);
  } catch (Error& e) {
    e.add_context(fmt::format("in {}: ", what_));
    throw;
  }
  std::vector<Tensor> result;
  for (const std::string& name : outputs_) {
    auto it = out.find(name);
    if (it == out.end()) it = feeds.find(name);  // an output that is an input passes through
    if (it == feeds.end()) throw InvalidModel(fmt::format("{} does not produce its output '{}'", what_, name));
    result.push_back(it->second.clone());
  }
  return result;
}

Tensor slice(const Tensor& t, int64_t axis, int64_t index) {
  const Tensor c = t.contiguous();
  Shape out;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < c.rank(); ++d) {
    if (d < axis) outer *= c.dim(d);
    if (d > axis) inner *= c.dim(d);
    if (d != axis) out.push_back(c.dim(d));
  }
  Tensor s = Tensor::empty(c.dtype(), out);
  const size_t es = dtype_size(c.dtype()), row = size_t(inner) * es;
  const auto* src = static_cast<const char*>(c.raw_data());
  auto* dst = static_cast<char*>(s.raw_data());
  for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * row, src + ((o * c.dim(axis) + index) * inner) * es, row);
  return s;
}

Tensor stack(const std::vector<Tensor>& slices, int64_t axis, const Shape& empty_shape, DType empty_dtype) {
  if (slices.empty()) return Tensor::zeros(empty_dtype, empty_shape);
  if (!slices[0].is_tensor())
    throw TypeError(fmt::format("scan output slice 0 is a {}: scan outputs are tensors", slices[0].describe()));
  const Shape& one = slices[0].shape();
  Shape out = one;
  out.insert(out.begin() + axis, int64_t(slices.size()));
  Tensor s = Tensor::empty(slices[0].dtype(), out);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < int64_t(one.size()); ++d) (d < axis ? outer : inner) *= one[size_t(d)];
  const size_t es = dtype_size(s.dtype()), row = size_t(inner) * es;
  auto* dst = static_cast<char*>(s.raw_data());
  for (size_t k = 0; k < slices.size(); ++k) {
    if (!slices[k].is_tensor())
      throw TypeError(fmt::format("scan output slice {} is a {}: scan outputs are tensors", k, slices[k].describe()));
    if (slices[k].shape() != one || slices[k].dtype() != s.dtype())
      throw ShapeError(fmt::format("scan output slice {} is {} but the first was {}", k, slices[k].describe(),
                                   slices[0].describe()));
    const Tensor c = slices[k].contiguous();
    const auto* src = static_cast<const char*>(c.raw_data());
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + ((o * int64_t(slices.size()) + int64_t(k)) * inner) * es, src + o * row, row);
  }
  return s;
}

}  // namespace kiln::control

namespace kiln {
namespace {

using control::ControlFlowKernel;
using control::Subgraph;

bool truth(const Tensor& t, const char* op, const char* what) {
  if (t.numel() != 1) throw ShapeError(fmt::format("{}: {} {} must hold one value", op, what, t.describe()));
  return t.item_as_double() != 0;
}

class IfKernel final : public ControlFlowKernel {
 public:
  using ControlFlowKernel::ControlFlowKernel;
  bool takes_non_tensors() const override { return true; }  // captures and branch results of any kind
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const bool cond = truth(ctx.value(0), "If", "cond");
    const std::vector<Tensor> caps = capture_values(ctx);
    Subgraph& branch = cond ? subgraph(then_, "then_branch", ctx.opset, "If's then_branch")
                            : subgraph(else_, "else_branch", ctx.opset, "If's else_branch");
    results_ = branch.run({}, caps);
    if (results_.size() != node_.outputs.size())
      throw InvalidModel(fmt::format("If: the {} branch gives {} outputs but the node has {}", cond ? "then" : "else",
                                     results_.size(), node_.outputs.size()));
    return metas();
  }

 private:
  std::unique_ptr<Subgraph> then_, else_;
};

// Loop(M, cond, v_initial...): body(i, cond, v...) -> (cond, v..., scan outputs...) while i < M and cond.
class LoopKernel final : public ControlFlowKernel {
 public:
  using ControlFlowKernel::ControlFlowKernel;
  bool takes_non_tensors() const override { return true; }  // loop-carried sequences and optionals
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const size_t n = explicit_inputs(ctx);
    if (n < 2) throw InvalidModel("Loop: needs the inputs M and cond (either may be empty)");
    subgraph(body_, "body", ctx.opset, "Loop's body");
    const size_t carried = n - 2;
    if (body_->num_inputs() != carried + 2 || body_->num_outputs() < carried + 1)
      throw InvalidModel(
          fmt::format("Loop: the body takes {} inputs and gives {} outputs, but the node carries {} "
                      "values (the body must take 2 + {} and give 1 + {} + scan outputs)",
                      body_->num_inputs(), body_->num_outputs(), carried, carried, carried));
    const size_t scans = body_->num_outputs() - 1 - carried;
    const bool has_max = ctx.has_input(0), has_cond = ctx.has_input(1);
    const int64_t max_trips = has_max ? ctx.value(0).to_int64_vector().at(0) : 0;
    bool cond = has_cond ? truth(ctx.value(1), "Loop", "cond") : true;
    std::vector<Tensor> v;
    for (size_t i = 2; i < n; ++i) v.push_back(ctx.value(i));
    const std::vector<Tensor> caps = capture_values(ctx);
    std::vector<std::vector<Tensor>> scan(scans);
    for (int64_t i = 0; (!has_max || i < max_trips) && cond; ++i) {
      std::vector<Tensor> in{Tensor::scalar<int64_t>(i), Tensor::scalar<bool>(cond)};
      in.insert(in.end(), v.begin(), v.end());
      std::vector<Tensor> out = body_->run(in, caps);
      cond = truth(out[0], "Loop", "the body's cond output");
      for (size_t k = 0; k < carried; ++k) v[k] = out[1 + k];
      for (size_t k = 0; k < scans; ++k) scan[k].push_back(out[1 + carried + k]);
    }
    results_ = v;
    for (size_t k = 0; k < scans; ++k)
      results_.push_back(control::stack(scan[k], 0, {0}, body_->output_dtype(1 + carried + k)));
    return metas();
  }

 private:
  std::unique_ptr<Subgraph> body_;
};

std::vector<int64_t> axes_attr(const Node& node, const char* key, size_t count) {
  std::vector<int64_t> v = node.attr_ints(key, std::vector<int64_t>(count, 0));
  if (v.size() != count)
    throw InvalidModel(fmt::format("Scan: attribute {} has {} values for {} tensors", key, v.size(), count));
  return v;
}

// Scan (opset 9+): state... and scan inputs... -> final states and scan outputs, iterating the body
// over slices of the scan inputs along their axes.
class ScanKernel final : public ControlFlowKernel {
 public:
  using ControlFlowKernel::ControlFlowKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const size_t n = explicit_inputs(ctx);
    const auto m = static_cast<size_t>(node_.attr_int("num_scan_inputs"));
    if (m < 1 || m > n) throw InvalidModel(fmt::format("Scan: num_scan_inputs {} must be in [1, {}]", m, n));
    subgraph(body_, "body", ctx.opset, "Scan's body");
    const size_t states = n - m;
    if (body_->num_inputs() != n || body_->num_outputs() < states)
      throw InvalidModel(
          fmt::format("Scan: the body takes {} inputs and gives {} outputs for {} states and {} scan "
                      "inputs",
                      body_->num_inputs(), body_->num_outputs(), states, m));
    const size_t outs = body_->num_outputs() - states;
    std::vector<Tensor> state, xs;
    for (size_t i = 0; i < states; ++i) state.push_back(ctx.value(i));
    for (size_t i = states; i < n; ++i) xs.push_back(ctx.value(i));
    const std::vector<int64_t> in_axes = axes_attr(node_, "scan_input_axes", m);
    const std::vector<int64_t> in_dirs = axes_attr(node_, "scan_input_directions", m);
    const std::vector<int64_t> out_axes = axes_attr(node_, "scan_output_axes", outs);
    const std::vector<int64_t> out_dirs = axes_attr(node_, "scan_output_directions", outs);
    int64_t steps = -1;
    std::vector<int64_t> axes(m);
    for (size_t j = 0; j < m; ++j) {
      axes[j] = in_axes[j] < 0 ? in_axes[j] + xs[j].rank() : in_axes[j];
      if (axes[j] < 0 || axes[j] >= xs[j].rank())
        throw InvalidModel(
            fmt::format("Scan: scan_input_axes[{}] = {} is outside input {}", j, in_axes[j], xs[j].describe()));
      const int64_t len = xs[j].dim(axes[j]);
      if (steps >= 0 && len != steps)
        throw ShapeError(fmt::format("Scan: scan input {} {} has {} steps along axis {}, the others {}", j,
                                     xs[j].describe(), len, axes[j], steps));
      steps = len;
    }
    const std::vector<Tensor> caps = capture_values(ctx);
    std::vector<std::vector<Tensor>> ys(outs);
    for (int64_t t = 0; t < steps; ++t) {
      std::vector<Tensor> in = state;
      for (size_t j = 0; j < m; ++j) in.push_back(control::slice(xs[j], axes[j], in_dirs[j] ? steps - 1 - t : t));
      std::vector<Tensor> out = body_->run(in, caps);
      for (size_t k = 0; k < states; ++k) state[k] = out[k];
      for (size_t k = 0; k < outs; ++k) ys[k].push_back(out[states + k]);
    }
    results_ = state;
    for (size_t k = 0; k < outs; ++k) {
      if (out_dirs[k]) std::reverse(ys[k].begin(), ys[k].end());
      const int64_t rank = ys[k].empty() ? 1 : ys[k][0].rank() + 1;
      const int64_t axis = out_axes[k] < 0 ? out_axes[k] + rank : out_axes[k];
      if (axis < 0 || axis >= rank)
        throw InvalidModel(fmt::format("Scan: scan_output_axes[{}] = {} is outside rank {}", k, out_axes[k], rank));
      results_.push_back(control::stack(ys[k], axis, {0}, body_->output_dtype(states + k)));
    }
    return metas();
  }

 private:
  std::unique_ptr<Subgraph> body_;
};

// Scan-8: a leading batch axis on every state and scan input, scan inputs iterated along axis 1,
// optional sequence_lens first (rows shorter than the batch's longest scan fewer steps; their scan
// outputs are zero past their length).
class Scan8Kernel final : public ControlFlowKernel {
 public:
  using ControlFlowKernel::ControlFlowKernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const size_t n = explicit_inputs(ctx);
    const auto m = static_cast<size_t>(node_.attr_int("num_scan_inputs"));
    if (m < 1 || m + 1 > n) throw InvalidModel(fmt::format("Scan: num_scan_inputs {} must be in [1, {}]", m, n - 1));
    subgraph(body_, "body", ctx.opset, "Scan's body");
    const size_t states = n - 1 - m;
    std::vector<Tensor> in_all;
    for (size_t i = 1; i < n; ++i) in_all.push_back(ctx.value(i));
    const int64_t batch = in_all[0].dim(0), steps = in_all[states].dim(1);
    std::vector<int64_t> lens(size_t(batch), steps);
    if (ctx.has_input(0)) lens = ctx.value(0).to_int64_vector();
    const std::vector<int64_t> dirs = node_.attr_ints("directions", std::vector<int64_t>(m, 0));
    const std::vector<Tensor> caps = capture_values(ctx);
    std::vector<std::vector<Tensor>> per_batch;  // [batch][output]
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<Tensor> state;
      for (size_t k = 0; k < states; ++k) state.push_back(control::slice(in_all[k], 0, b));
      std::vector<std::vector<Tensor>> ys;
      for (int64_t t = 0; t < lens[size_t(b)]; ++t) {
        std::vector<Tensor> in = state;
        for (size_t j = 0; j < m; ++j)
          in.push_back(control::slice(control::slice(in_all[states + j], 0, b), 0,
                                      dirs.size() > j && dirs[j] ? lens[size_t(b)] - 1 - t : t));
        std::vector<Tensor> out = body_->run(in, caps);
        for (size_t k = 0; k < states; ++k) state[k] = out[k];
        ys.resize(out.size() - states);
        for (size_t k = 0; k < ys.size(); ++k) ys[k].push_back(out[states + k]);
      }
      for (auto& y : ys)
        while (int64_t(y.size()) < steps) y.push_back(Tensor::zeros(y[0].dtype(), y[0].shape()));
      std::vector<Tensor> row = state;
      for (auto& y : ys) row.push_back(control::stack(y, 0, {0}, DType::Float32));
      per_batch.push_back(std::move(row));
    }
    results_.clear();
    for (size_t k = 0; k < (per_batch.empty() ? 0 : per_batch[0].size()); ++k) {
      std::vector<Tensor> col;
      col.reserve(per_batch.size());
      for (auto& row : per_batch) col.push_back(row[k]);
      results_.push_back(control::stack(col, 0, {0}, DType::Float32));
    }
    return metas();
  }

 private:
  std::unique_ptr<Subgraph> body_;
};

template <class K>
KernelRegistrar reg(const char* op, int64_t since, int64_t end) {
  return KernelRegistrar({"", op, since, end, {}}, [](const Node& n) { return std::make_unique<K>(n); });
}

const KernelRegistrar if_reg = reg<IfKernel>("If", 1, kMaxOpset);
const KernelRegistrar loop_reg = reg<LoopKernel>("Loop", 1, kMaxOpset);
const KernelRegistrar scan8_reg = reg<Scan8Kernel>("Scan", 8, 8);
const KernelRegistrar scan_reg = reg<ScanKernel>("Scan", 9, kMaxOpset);

}  // namespace
}  // namespace kiln

// The GradientBuilder: marks the values that need gradients, walks the forward nodes in reverse
// topological order calling each op's rule, sums gradients of values used several times, reduces
// broadcast gradients, and exposes one gradient output per trainable parameter.
#include <fmt/format.h>

#include <set>
#include <unordered_map>

#include "autodiff/builder_state.h"
#include "autodiff/recompute.h"
#include "autodiff/registry.h"
#include "autodiff/subgraph_gradient.h"
#include "ir/subgraph.h"

namespace kiln {

namespace {

bool is_float(DType t) { return is_floating(t); }

int64_t node_opset(const GradientBuilderState& st, const Node& n) { return st.model.opset(n.domain); }

// " (domain ai.onnx) at opset 12; its gradient rules cover opsets 13+" when the op has rules or
// markers at other opsets of its domain, "" when it has none at all.
std::string other_opsets(const GradientBuilderState& st, const Node& n) {
  const std::string ranges = GradientRegistry::global().ranges(n.domain, n.op_type);
  if (ranges.empty()) return "";
  return fmt::format(" (domain {}) at opset {}; its gradient rules cover opsets {}",
                     n.domain.empty() ? "ai.onnx" : n.domain, node_opset(st, n), ranges);
}

}  // namespace

namespace {

// Forward: which values depend on a trainable parameter (and through which one, for messages).
void mark_origins(GradientBuilderState& st, const std::vector<size_t>& order, const std::vector<std::string>& params) {
  const Graph& g = st.model.graph;
  for (const auto& p : params) st.origin[p] = p;
  for (size_t idx : order) {
    const Node& n = g.nodes[idx];
    if (gradient_kind(n.domain, n.op_type, node_opset(st, n)) == GradientKind::NoGradient) continue;
    std::string from;
    for (const auto& in : n.inputs)
      if (!in.empty() && st.origin.count(in)) {
        from = st.origin[in];
        break;
      }
    if (from.empty()) continue;
    for (const auto& out : n.outputs) {
      const auto dt = st.dtype_of(out);
      if (!out.empty() && (!dt || is_float(*dt))) st.origin[out] = from;
    }
  }
}

// The loss scale: a float32 scalar graph input, whose name must be free.
void add_loss_scale_input(GradientBuilderState& st, const std::string& name) {
  if (st.is_value(name))
    throw InvalidArgument(fmt::format("the loss scale input '{}' would clash with a value of the graph", name));
  st.reserve_name(name);
  ValueInfo v;
  v.name = name;
  v.dtype = DType::Float32;
  v.has_type = v.has_shape = true;
  st.model.graph.inputs.push_back(v);
  st.record(name, DType::Float32, {});
}

// Backward: seed d(loss)/d(loss) = 1 (or the loss scale).
void seed_loss(GradientBuilderState& st, const std::string& loss, const std::string& loss_scale) {
  const Node seed_node;  // a GradContext needs a node; the seed belongs to none
  GradContext seed(seed_node, st);
  const DType loss_type = seed.dtype(loss).value_or(DType::Float32);
  const std::string one = loss_scale.empty()
                              ? seed.scalar_like(1.0, loss)
                              : seed.emit("Cast", {loss_scale}, {{"to", Attribute::of_int(dtype_to_onnx(loss_type))}});
  st.add_contribution(loss, seed.emit("Expand", {one, seed.emit("Shape", {loss})}));
}

// Then every node in reverse order through its rule; `loss` names the target in messages.
void run_rules(GradientBuilderState& st, const std::vector<size_t>& order, const std::string& loss) {
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node n = st.model.graph.nodes[*it];  // a copy: emitting nodes grows the vector
    bool flows = false, needed = false;
    for (const auto& out : n.outputs) flows = flows || st.has_contributions(out);
    for (const auto& in : n.inputs) needed = needed || (!in.empty() && st.origin.count(in));
    if (!flows || !needed) continue;
    const GradientEntry* entry = GradientRegistry::global().find(n.domain, n.op_type, node_opset(st, n));
    if (entry != nullptr && entry->no_gradient()) continue;
    if (entry == nullptr) {
      std::string param;
      for (const auto& in : n.inputs)
        if (!in.empty() && st.origin.count(in)) param = st.origin[in];
      throw Unsupported(
          fmt::format("{} is on the path from parameter '{}' to loss '{}', but Kiln has no gradient "
                      "for op {}{}; freeze '{}' or the parameters before this node",
                      n.label(), param, loss, n.op_type, other_opsets(st, n), param));
    }
    st.current = n.name.empty() ? n.op_type : n.name;
    GradContext ctx(n, st);
    try {
      entry->rule(ctx);
    } catch (Error& e) {
      e.add_context(fmt::format("gradient of {}: ", n.label()));
      throw;
    }
  }
}

// Outputs: the loss first, the forward outputs, then one gradient per parameter (zeros where the
// loss does not depend on it).
GradientGraph expose_gradients(GradientBuilderState& st, const std::vector<std::string>& params,
                               const GradientOptions& options) {
  GradientGraph result;
  Graph& out = st.model.graph;
  std::vector<ValueInfo> outputs;
  outputs.push_back(st.value_info_of(options.loss));
  for (const ValueInfo& v : out.outputs)
    if (v.name != options.loss) outputs.push_back(v);
  st.current = "grads";
  const Node grads_node;
  for (const auto& p : params) {
    const std::string name = p + options.grad_suffix;
    GradContext ctx(grads_node, st);
    std::string grad = st.summed_gradient(p);
    if (grad.empty()) {  // the loss does not depend on p: its gradient is zero
      grad = ctx.emit("ConstantOfShape", {ctx.emit("Shape", {p})},
                      {{"value", Attribute::of_tensor(Tensor::zeros(out.initializers.at(p).dtype(), {1}))}});
    }
    Node id;
    id.op_type = "Identity";
    id.name = name + "/Identity";
    id.inputs = {grad};
    id.outputs = {name};
    out.nodes.push_back(std::move(id));
    ValueInfo vi;
    vi.name = name;
    vi.dtype = out.initializers.at(p).dtype();
    vi.has_type = vi.has_shape = true;
    for (int64_t d : out.initializers.at(p).shape()) vi.dims.push_back(Dim{d, ""});
    outputs.push_back(vi);
    result.grads[p] = name;
  }
  out.outputs = outputs;
  if (st.used_kiln_ops) st.model.opsets[kKilnDomain] = 1;
  result.parameters = params;
  result.model = std::move(st.model);
  return result;
}

}  // namespace

GradientGraph build_gradient_graph(const Model& forward, const GradientOptions& options) {
  Model lifted = forward;
  lift_captures(lifted.graph);  // values subgraphs read become inputs of their If / Loop / Scan
  GradientBuilderState st(lifted, options.mixed_precision);
  if (options.loss.empty()) throw InvalidArgument("no loss value named: GradientOptions::loss is empty");
  if (!st.is_value(options.loss))
    throw InvalidArgument(fmt::format("loss '{}' is not a value of the graph", options.loss));
  const std::vector<std::string> params =
      select_parameters(st.model, options.loss, options.requires_grad, options.frozen_params, Purpose::Differentiate)
          .trainable;
  if (auto shape = st.static_shape(options.loss); shape && numel(*shape) != 1)
    throw ShapeError(
        fmt::format("loss '{}' must be a scalar (one element) but has shape {}", options.loss, to_string(*shape)));
  const std::vector<size_t> order = st.model.graph.topological_order();
  mark_origins(st, order, params);
  for (const auto& p : params) {
    if (st.is_value(p + options.grad_suffix))
      throw InvalidArgument(
          fmt::format("the gradient output '{}{}' would clash with a value of the graph", p, options.grad_suffix));
    st.reserve_name(p + options.grad_suffix);
  }
  const size_t forward_nodes = st.model.graph.nodes.size();
  if (!options.loss_scale_input.empty()) add_loss_scale_input(st, options.loss_scale_input);
  seed_loss(st, options.loss, options.loss_scale_input);
  run_rules(st, order, options.loss);
  GradientGraph result = expose_gradients(st, params, options);
  const RecomputeReport recompute = recompute_segments(result.model, forward_nodes, params, options.recompute);
  result.recompute_boundaries = recompute.boundaries;
  result.recomputed_nodes = recompute.nodes;
  return result;
}

Graph build_subgraph_gradient(const SubgraphGradientRequest& r) {
  Model m;
  m.graph = *r.graph;
  m.opsets[""] = r.opset;
  lift_captures(m.graph);
  const std::vector<ValueInfo> own_inputs = m.graph.inputs;
  const std::vector<ValueInfo> outputs = m.graph.outputs;
  // The outer values and the seeds are graph inputs while the builder runs (typed, differentiable).
  std::set<std::string> defined;
  for (const ValueInfo& v : m.graph.inputs) defined.insert(v.name);
  for (const auto& [name, t] : m.graph.initializers) defined.insert(name);
  for (const Node& n : m.graph.nodes)
    for (const std::string& o : n.outputs) defined.insert(o);
  for (const ValueInfo& v : r.outer)
    if (defined.insert(v.name).second) m.graph.inputs.push_back(v);
  for (const ValueInfo& v : r.seed_info)
    if (!v.name.empty() && defined.insert(v.name).second) m.graph.inputs.push_back(v);
  const size_t forward_nodes = m.graph.nodes.size();
  GradientBuilderState st(m);
  const std::vector<size_t> order = st.model.graph.topological_order();
  mark_origins(st, order, r.wrt);
  for (size_t j = 0; j < outputs.size() && j < r.seeds.size(); ++j)
    if (!r.seeds[j].empty()) st.add_contribution(outputs[j].name, r.seeds[j]);
  run_rules(st, order, "the subgraph's outputs");
  Graph& g = st.model.graph;
  std::vector<ValueInfo> grads;
  const Node grads_node;
  GradContext ctx(grads_node, st);
  for (const std::string& w : r.wrt) {
    std::string grad = st.summed_gradient(w);
    const DType dt = st.dtype_of(w).value_or(DType::Float32);
    if (grad.empty())
      grad = ctx.emit("ConstantOfShape", {ctx.emit("Shape", {w})},
                      {{"value", Attribute::of_tensor(Tensor::zeros(dt, {1}))}});
    const std::string name = ctx.emit("Identity", {grad});
    ValueInfo vi;
    vi.name = name;
    vi.dtype = dt;
    vi.has_type = true;
    grads.push_back(vi);
  }
  // The backward's names get the prefix; the forward's stay (the subgraph's own, or outer reads).
  std::map<std::string, std::string> rename;
  for (size_t i = forward_nodes; i < g.nodes.size(); ++i)
    for (std::string& o : g.nodes[i].outputs)
      if (!o.empty()) o = rename[o] = r.prefix + o;
  for (size_t i = forward_nodes; i < g.nodes.size(); ++i)
    for (std::string& in : g.nodes[i].inputs)
      if (rename.count(in)) in = rename[in];
  for (ValueInfo& v : grads) v.name = rename.count(v.name) ? rename[v.name] : v.name;
  g.inputs = own_inputs;
  g.outputs = grads;
  g.value_info.clear();
  return std::move(st.model.graph);
}

GradientKind gradient_kind(const std::string& domain, const std::string& op_type, int64_t opset) {
  const GradientEntry* entry = GradientRegistry::global().find(domain, op_type, opset);
  if (entry == nullptr) return GradientKind::None;
  return entry->no_gradient() ? GradientKind::NoGradient : GradientKind::Rule;
}

GradientKind gradient_kind(const std::string& domain, const std::string& op_type) {
  return gradient_kind(domain, op_type, kMaxOpset);
}

}  // namespace kiln

// The GradientBuilder: marks the values that need gradients, walks the forward nodes in reverse
// topological order calling each op's rule, sums gradients of values used several times, reduces
// broadcast gradients, and exposes one gradient output per trainable parameter.
#include <fmt/format.h>

#include <set>
#include <unordered_map>

#include "autodiff/builder_state.h"

namespace kiln {

namespace {

bool is_float(DType t) { return is_floating(t); }

std::vector<std::string> default_parameters(const Model& m, const GradientOptions& o) {
  // BatchNormalization's running statistics are buffers, not parameters (as in PyTorch).
  std::set<std::string> buffers;
  for (const Node& n : m.graph.nodes)
    if (n.op_type == "BatchNormalization" && n.domain.empty())
      for (size_t i = 3; i < n.inputs.size() && i < 5; ++i) buffers.insert(n.inputs[i]);
  const std::set<std::string> frozen(o.frozen_params.begin(), o.frozen_params.end());
  std::vector<std::string> params;
  for (const auto& [name, t] : m.graph.initializers)
    if (is_float(t.dtype()) && !buffers.count(name) && !frozen.count(name)) params.push_back(name);
  return params;
}

std::vector<std::string> choose_parameters(const Model& m, const GradientOptions& o) {
  const std::set<std::string> frozen(o.frozen_params.begin(), o.frozen_params.end());
  for (const auto& name : o.frozen_params)
    if (!m.graph.initializers.count(name))
      throw InvalidArgument(fmt::format("frozen parameter '{}' is not an initializer of the model", name));
  if (o.requires_grad.empty()) return default_parameters(m, o);
  for (const auto& name : o.requires_grad) {
    if (frozen.count(name))
      throw InvalidArgument(fmt::format("'{}' is listed both as requiring a gradient and as frozen", name));
    auto it = m.graph.initializers.find(name);
    if (it == m.graph.initializers.end())
      throw InvalidArgument(fmt::format("'{}' requires a gradient but is not an initializer of the model", name));
    if (!is_float(it->second.dtype()))
      throw TypeError(fmt::format("'{}' requires a gradient but is {}; only floating-point tensors have gradients",
                                  name, it->second.describe()));
  }
  return o.requires_grad;
}

}  // namespace

GradientGraph build_gradient_graph(const Model& forward, const GradientOptions& options) {
  GradientBuilderState st(forward);
  const Graph& g = st.model.graph;
  if (options.loss.empty()) throw InvalidArgument("no loss value named: GradientOptions::loss is empty");
  const std::vector<std::string> params = choose_parameters(st.model, options);
  if (!st.is_value(options.loss))
    throw InvalidArgument(fmt::format("loss '{}' is not a value of the graph", options.loss));
  if (auto shape = st.static_shape(options.loss); shape && numel(*shape) != 1)
    throw ShapeError(fmt::format("loss '{}' must be a scalar (one element) but has shape {}", options.loss,
                                 to_string(*shape)));

  // Forward: which values depend on a trainable parameter (and through which one, for messages).
  const std::vector<size_t> order = g.topological_order();
  for (const auto& p : params) st.origin[p] = p;
  for (size_t idx : order) {
    const Node& n = g.nodes[idx];
    if (GradientRegistry::global().no_gradient(n.domain, n.op_type)) continue;
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

  for (const auto& p : params) {
    if (st.is_value(p + options.grad_suffix))
      throw InvalidArgument(fmt::format("the gradient output '{}{}' would clash with a value of the graph", p,
                                        options.grad_suffix));
    st.reserve_name(p + options.grad_suffix);
  }

  // Backward: seed d(loss)/d(loss) = 1, then every node in reverse order.
  {
    const Node seed_node;  // a GradContext needs a node; the seed belongs to none
    GradContext seed(seed_node, st);
    const std::string one = seed.scalar_like(1.0, options.loss);
    st.add_contribution(options.loss, seed.emit("Expand", {one, seed.emit("Shape", {options.loss})}));
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node n = st.model.graph.nodes[*it];  // a copy: emitting nodes grows the vector
    bool flows = false, needed = false;
    for (const auto& out : n.outputs) flows = flows || st.has_contributions(out);
    for (const auto& in : n.inputs) needed = needed || (!in.empty() && st.origin.count(in));
    if (!flows || !needed) continue;
    if (GradientRegistry::global().no_gradient(n.domain, n.op_type)) continue;
    const GradientRule* rule = GradientRegistry::global().rule(n.domain, n.op_type);
    if (rule == nullptr) {
      std::string param;
      for (const auto& in : n.inputs)
        if (!in.empty() && st.origin.count(in)) param = st.origin[in];
      throw Unsupported(fmt::format("{} is on the path from parameter '{}' to loss '{}', but Kiln has no gradient "
                                    "for op {}; freeze '{}' or the parameters before this node",
                                    n.label(), param, options.loss, n.op_type, param));
    }
    st.current = n.name.empty() ? n.op_type : n.name;
    GradContext ctx(n, st);
    try {
      (*rule)(ctx);
    } catch (Error& e) {
      e.add_context(fmt::format("gradient of {}: ", n.label()));
      throw;
    }
  }

  GradientGraph result;
  Graph& out = st.model.graph;
  // Outputs: the loss first, the forward outputs, then the gradients.
  std::vector<ValueInfo> outputs;
  outputs.push_back(st.value_info_of(options.loss));
  for (const ValueInfo& v : g.outputs)
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

GradientKind gradient_kind(const std::string& domain, const std::string& op_type) {
  if (GradientRegistry::global().rule(domain, op_type)) return GradientKind::Rule;
  if (GradientRegistry::global().no_gradient(domain, op_type)) return GradientKind::NoGradient;
  return GradientKind::None;
}

}  // namespace kiln

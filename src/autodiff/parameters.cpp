// Which initializers get gradients: the one set of rules (and messages) for the gradient builder,
// artifact generation and the tools. PyTorch's notions: parameters are trained unless frozen;
// BatchNormalization's running statistics are buffers, never parameters.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "ir/subgraph.h"
#include "kiln/autodiff.h"
#include "kiln/error.h"

namespace kiln {

namespace {

// Initializers in the order nodes first read them (the order of the forward computation).
std::vector<std::string> initializers_in_use_order(const Graph& g) {
  std::vector<std::string> order;
  std::set<std::string> seen;
  for (size_t idx : g.topological_order())
    for (const auto& in : g.nodes[idx].inputs)
      if (!in.empty() && g.initializers.count(in) && seen.insert(in).second) order.push_back(in);
  return order;
}

// Values through which a gradient can reach `loss`: walking back from the loss through ops that
// have gradients, over floating-point values only.
std::set<std::string> gradient_reach(const Model& m, const std::string& loss) {
  Graph lifted = m.graph;
  lift_captures(lifted);  // what If / Loop / Scan subgraphs read counts as their nodes' inputs
  const Graph& g = lifted;
  std::map<std::string, DType> dtypes;
  for (const auto* list : {&g.inputs, &g.outputs, &g.value_info})
    for (const auto& v : *list)
      if (v.has_type) dtypes[v.name] = v.dtype;
  for (const auto& [name, t] : g.initializers) dtypes[name] = t.dtype();
  auto floating = [&](const std::string& v) {
    auto it = dtypes.find(v);
    return it == dtypes.end() || is_floating(it->second);
  };
  std::set<std::string> reach{loss};
  const std::vector<size_t> order = g.topological_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node& n = g.nodes[*it];
    if (gradient_kind(n.domain, n.op_type, m.opset(n.domain)) == GradientKind::NoGradient) continue;
    bool flows = false;
    for (const auto& o : n.outputs) flows = flows || (!o.empty() && reach.count(o) && floating(o));
    if (!flows) continue;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty() || !floating(n.inputs[i])) continue;
      // A training-mode BatchNormalization's outputs do not depend on its running statistics.
      if (is_running_statistic_input(n, i) && n.attr_int("training_mode", 0) != 0) continue;
      reach.insert(n.inputs[i]);
    }
  }
  return reach;
}

void check_requests(const Graph& g, const ParameterSelection& p, const std::vector<std::string>& requires_grad,
                    const std::set<std::string>& frozen, Purpose purpose) {
  const std::set<std::string> buffers(p.buffers.begin(), p.buffers.end());
  for (const auto& name : requires_grad) {
    if (frozen.count(name))
      throw InvalidArgument(fmt::format("'{}' is listed both in requires_grad and in frozen_params", name));
    auto it = g.initializers.find(name);
    if (it == g.initializers.end())
      throw InvalidArgument(fmt::format("requires_grad names '{}', which is not an initializer of the model", name));
    if (!is_floating(it->second.dtype()))
      throw TypeError(fmt::format("requires_grad names '{}', which is {}; only floating-point parameters are trained",
                                  name, it->second.describe()));
    if (purpose == Purpose::Train && buffers.count(name))
      throw InvalidArgument(
          fmt::format("requires_grad names '{}', a running statistic of a training-mode "
                      "BatchNormalization; it is updated by the forward pass, not trained",
                      name));
  }
  for (const auto& name : frozen)
    if (!g.initializers.count(name))
      throw InvalidArgument(fmt::format("frozen_params names '{}', which is not an initializer of the model", name));
}

}  // namespace

bool is_running_statistic_input(const Node& n, size_t input) {
  return n.domain.empty() && n.op_type == "BatchNormalization" && (input == 3 || input == 4);
}

ParameterSelection select_parameters(const Model& m, const std::string& loss,
                                     const std::vector<std::string>& requires_grad,
                                     const std::vector<std::string>& frozen_params, Purpose purpose) {
  // Values that If / Loop / Scan subgraphs read count as inputs of those nodes (ir/subgraph.h).
  Graph lifted = m.graph;
  lift_captures(lifted);
  const Graph& g = lifted;
  ParameterSelection p;
  // Statistics of a training-mode BatchNormalization are buffers the forward pass updates
  // (outputs 1, 2 <- inputs 3, 4); those of an inference-mode one are constants. Neither is trained.
  std::set<std::string> statistics;
  for (const Node& n : g.nodes) {
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (is_running_statistic_input(n, i) && !n.inputs[i].empty()) statistics.insert(n.inputs[i]);
    if (!is_running_statistic_input(n, 3) || n.attr_int("training_mode", 0) == 0) continue;
    for (size_t out = 1; out < 3 && out < n.outputs.size(); ++out) {
      const size_t in = out + 2;
      if (n.outputs[out].empty() || in >= n.inputs.size() || !g.initializers.count(n.inputs[in])) continue;
      p.updates.emplace_back(n.inputs[in], n.outputs[out]);
      if (std::find(p.buffers.begin(), p.buffers.end(), n.inputs[in]) == p.buffers.end())
        p.buffers.push_back(n.inputs[in]);
    }
  }
  const std::set<std::string> frozen(frozen_params.begin(), frozen_params.end());
  check_requests(g, p, requires_grad, frozen, purpose);
  if (!requires_grad.empty()) {
    p.trainable = requires_grad;
  } else {
    const std::set<std::string> reach = gradient_reach(m, loss);
    for (const auto& name : initializers_in_use_order(g))
      if (is_floating(g.initializers.at(name).dtype()) && !frozen.count(name) && !statistics.count(name) &&
          reach.count(name))
        p.trainable.push_back(name);
  }
  const std::set<std::string> buffers(p.buffers.begin(), p.buffers.end());
  for (const auto& name : frozen_params)
    if (!buffers.count(name)) p.frozen.push_back(name);
  if (p.trainable.empty())
    throw InvalidArgument(
        "no trainable parameter: no floating-point initializer reaches the loss through ops with "
        "gradients (or all are frozen)");
  return p;
}

}  // namespace kiln

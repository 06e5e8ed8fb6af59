#include "training/optimizer_model.h"

#include <fmt/format.h>

#include <set>

#include "ir/graph_editor.h"
#include "kiln/autodiff.h"
#include "kiln/error.h"

namespace kiln::training {

namespace {

const std::vector<UpdateOp>& update_ops() {
  static const std::vector<UpdateOp> ops = {
      {"AdamW", "AdamWStep", {"exp_avg", "exp_avg_sq"}},
      {"SGD", "SGDStep", {"momentum_buffer"}},
      {"Lamb", "LambStep", {"exp_avg", "exp_avg_sq"}},
      {"Adagrad", "AdagradStep", {"sum"}},
  };
  return ops;
}

std::map<std::string, Attribute> attributes(OptimType type, const ArtifactOptions& o) {
  if (type == OptimType::AdamW) {
    const AdamWOptions& a = o.adamw;
    return {{"beta1", Attribute::of_float(a.beta1)},
            {"beta2", Attribute::of_float(a.beta2)},
            {"epsilon", Attribute::of_float(a.epsilon)},
            {"weight_decay", Attribute::of_float(a.weight_decay)},
            {"maximize", Attribute::of_int(a.maximize ? 1 : 0)},
            {"variant", Attribute::of_string(a.hf_variant ? "hf" : "torch")}};
  }
  if (type == OptimType::Lamb) {
    const LambOptions& l = o.lamb;
    std::map<std::string, Attribute> a = {{"beta1", Attribute::of_float(l.beta1)},
                                          {"beta2", Attribute::of_float(l.beta2)},
                                          {"epsilon", Attribute::of_float(l.epsilon)},
                                          {"weight_decay", Attribute::of_float(l.weight_decay)},
                                          {"bias_correction", Attribute::of_int(l.bias_correction ? 1 : 0)}};
    if (l.max_weight_norm >= 0) a["max_weight_norm"] = Attribute::of_float(l.max_weight_norm);
    return a;
  }
  if (type == OptimType::Adagrad) {
    const AdagradOptions& a = o.adagrad;
    return {{"lr_decay", Attribute::of_float(a.lr_decay)},
            {"weight_decay", Attribute::of_float(a.weight_decay)},
            {"initial_accumulator_value", Attribute::of_float(a.initial_accumulator_value)},
            {"epsilon", Attribute::of_float(a.epsilon)},
            {"maximize", Attribute::of_int(a.maximize ? 1 : 0)}};
  }
  const SGDOptions& s = o.sgd;
  if (s.nesterov && (s.momentum <= 0 || s.dampening != 0))
    throw InvalidArgument("SGD: Nesterov momentum requires a momentum and zero dampening (as torch.optim.SGD)");
  if (s.momentum < 0) throw InvalidArgument(fmt::format("SGD: invalid momentum {}", s.momentum));
  if (s.weight_decay < 0) throw InvalidArgument(fmt::format("SGD: invalid weight_decay {}", s.weight_decay));
  return {{"momentum", Attribute::of_float(s.momentum)},
          {"dampening", Attribute::of_float(s.dampening)},
          {"weight_decay", Attribute::of_float(s.weight_decay)},
          {"nesterov", Attribute::of_int(s.nesterov ? 1 : 0)},
          {"maximize", Attribute::of_int(s.maximize ? 1 : 0)}};
}

ValueInfo typed(const std::string& name, DType dtype, const Shape& shape) {
  ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.has_type = v.has_shape = true;
  for (int64_t d : shape) v.dims.push_back(Dim{d, ""});
  return v;
}

}  // namespace

const UpdateOp* update_op_for_type(const std::string& type) {
  for (const auto& op : update_ops())
    if (op.type == type) return &op;
  return nullptr;
}

const UpdateOp* update_op_for_node(const Node& node) {
  if (node.domain != kKilnDomain) return nullptr;
  for (const auto& op : update_ops())
    if (op.op_type == node.op_type) return &op;
  return nullptr;
}

std::vector<std::string> node_slots(const Node& node, const UpdateOp& op) {
  std::vector<std::string> slots;
  for (size_t i = 0; i < op.slots.size(); ++i) {
    const size_t in = kUpdateFirstSlot + i;
    if (in < node.inputs.size() && !node.inputs[in].empty()) slots.push_back(op.slots[i]);
  }
  return slots;
}

Model build_optimizer_model(OptimType type, const std::vector<OptimizerParameter>& params,
                            const ArtifactOptions& options) {
  if (!(options.learning_rate >= 0))
    throw InvalidArgument(fmt::format("invalid learning rate {}", options.learning_rate));
  const UpdateOp& op = *update_op_for_type(to_string(type));
  const auto attrs = attributes(type, options);
  const std::set<std::string> no_decay(options.no_weight_decay.begin(), options.no_weight_decay.end());
  std::vector<std::string> slots = op.slots;
  if (type == OptimType::SGD && options.sgd.momentum == 0) slots.clear();

  Model m;
  m.ir_version = 8;
  m.opsets = {{"", 17}, {kKilnDomain, 1}};
  m.graph.name = "optimizer";
  Graph& g = m.graph;
  g.inputs.push_back(typed("learning_rate", DType::Float32, {}));
  g.inputs.push_back(typed("step", DType::Int64, {}));
  std::set<std::string> names{"learning_rate", "step"};
  auto claim = [&](const std::string& name) {
    if (!names.insert(name).second)
      throw InvalidArgument(
          fmt::format("optimizer model: the name '{}' is used twice (parameter names clash with "
                      "gradient or slot names)",
                      name));
    return name;
  };
  for (const auto& p : params) {
    if (p.dtype != DType::Float32 && p.dtype != DType::Float64)
      throw Unsupported(
          fmt::format("optimizer: parameter '{}' is {}; the optimizer updates float32 and float64 "
                      "parameters",
                      p.name, dtype_name(p.dtype)));
    Node n;
    n.op_type = op.op_type;
    n.domain = kKilnDomain;
    n.name = p.name + "/" + op.op_type;
    n.attrs = attrs;
    if (no_decay.count(p.name)) n.attrs["weight_decay"] = Attribute::of_float(0.f);
    n.inputs = {"learning_rate", "step", claim(p.name), claim(p.name + "_grad")};
    n.outputs = {claim(p.name + ".new")};
    for (const auto& s : slots) {
      n.inputs.push_back(claim(p.name + "." + s));
      n.outputs.push_back(claim(p.name + "." + s + ".new"));
    }
    for (size_t i = 2; i < n.inputs.size(); ++i) g.inputs.push_back(typed(n.inputs[i], p.dtype, p.shape));
    for (const auto& o : n.outputs) g.outputs.push_back(typed(o, p.dtype, p.shape));
    g.nodes.push_back(std::move(n));
  }
  m.metadata[kOptimizerTypeKey] = op.type;
  m.metadata[kLearningRateKey] = fmt::format("{}", options.learning_rate);
  m.metadata["kiln.artifact"] = "optimizer";
  return m;
}

}  // namespace kiln::training

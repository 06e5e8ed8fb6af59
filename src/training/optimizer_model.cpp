#include "training/optimizer_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "ir/graph_editor.h"
#include "kiln/autodiff.h"
#include "kiln/error.h"

namespace kiln::training {

namespace {

// Adafactor's factored second moment: the row statistics drop the last axis, the column ones the
// second-to-last (transformers' exp_avg_sq_row / exp_avg_sq_col).
Shape adafactor_slot_shape(const std::string& slot, const Shape& param) {
  Shape s = param;
  if (slot == "exp_avg_sq_row") s.pop_back();
  else if (slot == "exp_avg_sq_col") s.erase(s.end() - 2);
  return s;
}

const std::vector<UpdateOp>& update_ops() {
  static const std::vector<UpdateOp> ops = {
      {"AdamW", "AdamWStep", {"exp_avg", "exp_avg_sq"}},
      {"SGD", "SGDStep", {"momentum_buffer"}},
      {"Lamb", "LambStep", {"exp_avg", "exp_avg_sq"}},
      {"Adagrad", "AdagradStep", {"sum"}},
      {"Adafactor",
       "AdafactorStep",
       {"exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq", "exp_avg"},
       &adafactor_slot_shape},
  };
  return ops;
}

// The slots a parameter of this shape gets.
std::vector<std::string> parameter_slots(OptimType type, const UpdateOp& op, const ArtifactOptions& o,
                                         const Shape& shape) {
  if (type == OptimType::SGD && o.sgd.momentum == 0) return {};
  if (type != OptimType::Adafactor) return op.slots;
  std::vector<std::string> slots;
  if (shape.size() >= 2) slots = {"exp_avg_sq_row", "exp_avg_sq_col"};
  else slots = {"exp_avg_sq"};
  if (o.adafactor.beta1) slots.push_back("exp_avg");
  return slots;
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
  if (type == OptimType::Adafactor) {
    const AdafactorOptions& a = o.adafactor;
    std::map<std::string, Attribute> out = {{"eps1", Attribute::of_float(a.eps1)},
                                            {"eps2", Attribute::of_float(a.eps2)},
                                            {"clip_threshold", Attribute::of_float(a.clip_threshold)},
                                            {"decay_rate", Attribute::of_float(a.decay_rate)},
                                            {"weight_decay", Attribute::of_float(a.weight_decay)},
                                            {"scale_parameter", Attribute::of_int(a.scale_parameter ? 1 : 0)},
                                            {"relative_step", Attribute::of_int(a.relative_step ? 1 : 0)},
                                            {"warmup_init", Attribute::of_int(a.warmup_init ? 1 : 0)}};
    if (a.beta1) out["beta1"] = Attribute::of_float(*a.beta1);
    return out;
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

std::vector<NodeSlot> node_slots(const Node& node, const UpdateOp& op) {
  std::vector<NodeSlot> slots;
  for (size_t i = 0; i < op.slots.size(); ++i) {
    const size_t in = kUpdateFirstSlot + i;
    if (in < node.inputs.size() && !node.inputs[in].empty()) slots.push_back({i, op.slots[i]});
  }
  return slots;
}

Shape slot_shape(const UpdateOp& op, const std::string& slot, const Shape& param) {
  return op.slot_shape ? op.slot_shape(slot, param) : param;
}

Model build_optimizer_model(OptimType type, const std::vector<OptimizerParameter>& params,
                            const ArtifactOptions& options) {
  if (!(options.learning_rate >= 0))
    throw InvalidArgument(fmt::format("invalid learning rate {}", options.learning_rate));
  const UpdateOp& op = *update_op_for_type(to_string(type));
  const auto attrs = attributes(type, options);
  const std::set<std::string> no_decay(options.no_weight_decay.begin(), options.no_weight_decay.end());

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
    g.inputs.push_back(typed(p.name, p.dtype, p.shape));
    g.inputs.push_back(typed(p.name + "_grad", p.dtype, p.shape));
    g.outputs.push_back(typed(p.name + ".new", p.dtype, p.shape));
    const auto slots = parameter_slots(type, op, options, p.shape);
    for (size_t i = 0; i < op.slots.size(); ++i) {
      const std::string& s = op.slots[i];
      if (std::find(slots.begin(), slots.end(), s) == slots.end()) {  // positional: an absent slot is ""
        n.inputs.emplace_back();
        n.outputs.emplace_back();
        continue;
      }
      const Shape shape = slot_shape(op, s, p.shape);
      n.inputs.push_back(claim(p.name + "." + s));
      n.outputs.push_back(claim(p.name + "." + s + ".new"));
      g.inputs.push_back(typed(n.inputs.back(), p.dtype, shape));
      g.outputs.push_back(typed(n.outputs.back(), p.dtype, shape));
    }
    while (n.inputs.back().empty()) n.inputs.pop_back();  // no trailing empty names
    while (n.outputs.back().empty()) n.outputs.pop_back();
    g.nodes.push_back(std::move(n));
  }
  m.metadata[kOptimizerTypeKey] = op.type;
  m.metadata[kLearningRateKey] = fmt::format("{}", options.learning_rate);
  m.metadata["kiln.artifact"] = "optimizer";
  return m;
}

}  // namespace kiln::training

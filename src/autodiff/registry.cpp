#include "autodiff/registry.h"

#include <fmt/format.h>

#include <algorithm>

#include "autodiff/builder_state.h"

namespace kiln {

GradientRegistry& GradientRegistry::global() {
  static GradientRegistry registry;
  return registry;
}

std::string GradientDef::range() const {
  if (end_version == kMaxOpset) return fmt::format("{}+", since_version);
  if (end_version == since_version) return std::to_string(since_version);
  return fmt::format("{}-{}", since_version, end_version);
}

void GradientRegistry::add(GradientDef def, GradientRule rule, std::string file) {
  OpKey key{def.domain, def.op_type};
  entries_[std::move(key)].push_back(GradientEntry{std::move(def), std::move(rule), std::move(file)});
}

const GradientEntry* GradientRegistry::find(const std::string& domain, const std::string& op, int64_t opset) const {
  auto it = entries_.find(OpKey{domain, op});
  if (it == entries_.end()) return nullptr;
  for (const GradientEntry& e : it->second)
    if (e.def.covers(opset)) return &e;
  return nullptr;
}

std::string GradientRegistry::ranges(const std::string& domain, const std::string& op) const {
  auto it = entries_.find(OpKey{domain, op});
  if (it == entries_.end()) return "";
  std::vector<const GradientDef*> defs;
  for (const GradientEntry& e : it->second) defs.push_back(&e.def);
  std::sort(defs.begin(), defs.end(), [](auto* a, auto* b) { return a->since_version < b->since_version; });
  std::string out;
  for (const GradientDef* d : defs) out += (out.empty() ? "" : ", ") + d->range();
  return out;
}

const std::string& GradContext::I(size_t i) const {
  if (i >= node.inputs.size() || node.inputs[i].empty()) throw InvalidModel(fmt::format("input {} is absent", i));
  return node.inputs[i];
}

const std::string& GradContext::O(size_t i) const {
  if (i >= node.outputs.size() || node.outputs[i].empty()) throw InvalidModel(fmt::format("output {} is absent", i));
  return node.outputs[i];
}

std::string GradContext::GO(size_t i) const {
  if (i >= node.outputs.size() || node.outputs[i].empty()) return "";
  return state_.summed_gradient(node.outputs[i]);
}

std::string GradContext::GO_or_zeros(size_t i) {
  std::string g = GO(i);
  if (!g.empty()) return g;
  const DType t = dtype(O(i)).value_or(DType::Float32);
  return emit("ConstantOfShape", {emit("Shape", {O(i)})}, {{"value", Attribute::of_tensor(Tensor::zeros(t, {1}))}});
}

bool GradContext::needs(size_t i) const {
  return i < node.inputs.size() && !node.inputs[i].empty() && state_.origin.count(node.inputs[i]) != 0;
}

void GradContext::set_GI(size_t i, const std::string& grad, Broadcast b) {
  if (!needs(i)) return;
  std::string g = grad;
  if (b == Broadcast::Maybe) {
    const auto in = state_.dims_of(I(i));
    const auto out = state_.dims_of(O(0));
    bool same = in && out && in->size() == out->size();
    for (size_t k = 0; same && k < in->size(); ++k) {
      const Dim& x = (*in)[k];
      const Dim& y = (*out)[k];
      same = x.value >= 0 ? x.value == y.value : (!x.param.empty() && x.param == y.param);
    }
    if (!same) g = emit(kKilnDomain, "SumToShapeOf", {grad, I(i)});
  }
  if (auto dt = state_.dtype_of(I(i))) state_.record(g, *dt, state_.dims_of(I(i)));
  state_.add_contribution(I(i), g);
}

std::vector<std::string> GradContext::emit_multi(const std::string& domain, const std::string& op,
                                                 std::vector<std::string> inputs, size_t num_outputs,
                                                 std::map<std::string, Attribute> attrs) {
  Node n;
  n.domain = domain;
  n.op_type = op;
  n.name = state_.fresh_name(state_.current + "_Grad/" + op);
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  for (size_t k = 0; k < num_outputs; ++k)
    n.outputs.push_back(state_.fresh_name(n.name + (num_outputs == 1 ? "_out" : fmt::format("_out{}", k))));
  if (domain == kKilnDomain) state_.used_kiln_ops = true;
  std::vector<std::string> outs = n.outputs;
  state_.model.graph.nodes.push_back(std::move(n));
  return outs;
}

std::string GradContext::emit(const std::string& domain, const std::string& op, std::vector<std::string> inputs,
                              std::map<std::string, Attribute> attrs) {
  return emit_multi(domain, op, std::move(inputs), 1, std::move(attrs))[0];
}

std::string GradContext::constant(const Tensor& value) {
  std::string out = emit("Constant", {}, {{"value", Attribute::of_tensor(value)}});
  std::vector<Dim> dims;
  dims.reserve(value.shape().size());
  for (int64_t d : value.shape()) dims.push_back(Dim{d, ""});
  state_.record(out, value.dtype(), dims);
  return out;
}

std::string GradContext::scalar_like(double value, const std::string& like) {
  const DType t = dtype(like).value_or(DType::Float32);
  Tensor s = Tensor::empty(t, {});
  visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    *s.data<T>() = from_double<T>(value);
  });
  return constant(s);
}

std::optional<int64_t> GradContext::rank(const std::string& value) const { return state_.rank_of(value); }
std::string GradContext::unknown_rank_reason() const {
  if (state_.shape_inference_error.empty()) return "";
  return fmt::format(" (inferring the forward graph failed at: {})", state_.shape_inference_error);
}
std::optional<DType> GradContext::dtype(const std::string& value) const { return state_.dtype_of(value); }
int64_t GradContext::opset() const { return state_.model.opset(node.domain); }

}  // namespace kiln

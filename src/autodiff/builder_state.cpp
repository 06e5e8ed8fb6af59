#include "autodiff/builder_state.h"

#include <fmt/format.h>

#include "ir/autocast.h"
#include "ir/fusion.h"
#include "kernels/node_inference.h"
#include "kiln/onnx_io.h"

namespace kiln {

namespace {

// The forward graph with its GELU chains and masked softmaxes fused (ir/fusion.h), so that their
// backward is one ai.kiln.GeluGrad or MaskedSoftmaxGrad pass instead of several; done before the
// editor collects the graph's names. Shape inference first gives the masked softmax its dtype hints.
// With mixed precision, autocast then casts the fused products' operands (ir/autocast.h).
Model fused(const Model& forward, DType mixed_precision) {
  Model m = forward;
  infer_shapes(m);
  fuse(m, /*for_training=*/true, /*attention_views=*/mixed_precision == DType::Float32);
  if (mixed_precision != DType::Float32) autocast(m, mixed_precision);
  return m;
}

}  // namespace

GradientBuilderState::GradientBuilderState(const Model& forward, DType mixed_precision)
    : model(fused(forward, mixed_precision)), editor_(model) {
  // Rules need ranks and dtypes of intermediates: take them from ONNX shape inference.
  infer_shapes(model);
  const Graph& g = model.graph;
  for (const auto* list : {&g.inputs, &g.outputs, &g.value_info, &g.overridable_initializers})
    for (const ValueInfo& v : *list) info_[v.name] = v;
  for (const auto& [name, t] : g.initializers) {
    ValueInfo v;
    v.name = name;
    v.dtype = t.dtype();
    v.has_type = v.has_shape = true;
    for (int64_t d : t.shape()) v.dims.push_back(Dim{d, ""});
    info_[name] = v;
  }
  for (const Node& n : g.nodes) {
    if (n.op_type == "Constant" && n.has_attr("value") && !n.outputs.empty()) {
      const Tensor& t = n.attr_tensor("value");
      std::vector<Dim> dims;
      for (int64_t d : t.shape()) dims.push_back(Dim{d, ""});
      record(n.outputs[0], t.dtype(), dims);
    }
  }
  for (const auto& [name, v] : info_) editor_.reserve(name);
  fill_ranks_from_kernels();
}

// ONNX's shape inference loses ranks through some exported patterns (shapes computed from Shape
// ops); Kiln's kernels infer them. Infer the forward graph at example sizes (symbolic dims = 2)
// and record dtype and rank of every value ONNX left unknown. Dims stay unknown: only the rank and
// the dtype are facts that do not depend on the example sizes.
void GradientBuilderState::fill_ranks_from_kernels() {
  bool missing = false;
  for (const Node& n : model.graph.nodes)
    for (const auto& out : n.outputs)
      if (!out.empty() && !dims_of(out)) missing = true;
  if (!missing) return;
  std::map<std::string, Tensor> feeds;
  for (const ValueInfo& v : model.graph.inputs) {
    if (!v.has_type || !v.has_shape) return;
    Shape shape;
    for (const Dim& d : v.dims) shape.push_back(d.value >= 0 ? d.value : 2);
    feeds[v.name] = Tensor::zeros(v.dtype, shape);
  }
  std::map<std::string, TensorMeta> metas;
  try {
    metas = infer_value_metas(model, feeds);
  } catch (const Error& e) {
    shape_inference_error = e.what();  // best effort: rules that need a rank say so, and why it is unknown
    return;
  }
  for (const auto& [name, m] : metas) {
    if (dims_of(name)) continue;
    record(name, m.dtype, std::vector<Dim>(m.shape.size(), Dim{-1, ""}));
  }
}

bool GradientBuilderState::is_value(const std::string& name) const {
  return editor_.has_value(name) || info_.count(name) != 0;
}

std::optional<DType> GradientBuilderState::dtype_of(const std::string& name) const {
  auto it = info_.find(name);
  if (it == info_.end() || !it->second.has_type) return std::nullopt;
  return it->second.dtype;
}

std::optional<std::vector<Dim>> GradientBuilderState::dims_of(const std::string& name) const {
  auto it = info_.find(name);
  if (it == info_.end() || !it->second.has_shape) return std::nullopt;
  return it->second.dims;
}

std::optional<int64_t> GradientBuilderState::rank_of(const std::string& name) const {
  auto d = dims_of(name);
  if (!d) return std::nullopt;
  return static_cast<int64_t>(d->size());
}

std::optional<Shape> GradientBuilderState::static_shape(const std::string& name) const {
  auto d = dims_of(name);
  if (!d) return std::nullopt;
  Shape s;
  for (const Dim& x : *d) {
    if (x.value < 0) return std::nullopt;
    s.push_back(x.value);
  }
  return s;
}

ValueInfo GradientBuilderState::value_info_of(const std::string& name) const {
  auto it = info_.find(name);
  if (it != info_.end()) return it->second;
  ValueInfo v;
  v.name = name;
  return v;
}

void GradientBuilderState::add_contribution(const std::string& value, const std::string& grad) {
  if (summed_.count(value))
    throw Error(fmt::format("internal: gradient of '{}' received a contribution after it was summed", value));
  contributions_[value].push_back(grad);
}

bool GradientBuilderState::has_contributions(const std::string& value) const {
  auto it = contributions_.find(value);
  return it != contributions_.end() && !it->second.empty();
}

std::string GradientBuilderState::summed_gradient(const std::string& value) {
  if (auto it = summed_.find(value); it != summed_.end()) return it->second;
  auto it = contributions_.find(value);
  if (it == contributions_.end() || it->second.empty()) return "";
  std::string result = it->second[0];
  if (it->second.size() > 1) {
    Node n;
    n.op_type = "Sum";
    n.name = fresh_name(value + "_grad/Sum");
    n.inputs = it->second;
    result = fresh_name(value + "_grad");
    n.outputs = {result};
    editor_.add_node(std::move(n));
    if (auto dt = dtype_of(value)) record(result, *dt, dims_of(value));
  }
  summed_[value] = result;
  return result;
}

void GradientBuilderState::record(const std::string& name, DType dtype, std::optional<std::vector<Dim>> dims) {
  ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.has_type = true;
  if (dims) {
    v.has_shape = true;
    v.dims = *dims;
  }
  info_[name] = v;
}

}  // namespace kiln

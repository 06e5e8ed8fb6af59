#include "kernels/node_inference.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/scratch.h"

namespace kiln {

namespace {

// Computes a node whose inputs are all known, at plan time.
void fold(NodeInference& r, const InferContext& ictx) {
  r.kernel->prepare(ictx, r.outputs);
  std::vector<Tensor> outs;
  outs.reserve(r.outputs.size());
  for (const TensorMeta& m : r.outputs) outs.push_back(Tensor::empty(m.dtype, m.shape));
  ComputeContext cctx{ictx.node, {}, {}};
  for (const auto& in : ictx.inputs) cctx.inputs.push_back(in ? &in->value : nullptr);
  for (Tensor& t : outs) cctx.outputs.push_back(&t);
  ScratchScope scratch;
  r.kernel->compute(cctx);
  for (size_t i = 0; i < r.outputs.size(); ++i) r.outputs[i].value = std::move(outs[i]);
}

// Nodes that make much more data than they read (ConstantOfShape, Expand or Tile of a small
// constant to a batch-sized shape) are not folded: at plan time they would hold memory for the
// plan's lifetime (and kiln inspect would allocate what it reports); at run time they take arena
// memory only while live. Transforms of initializers (Transpose, Cast, ...) make about as much as
// they read, and fold.
constexpr size_t kFoldGrowthBytes = size_t{1} << 16;

bool expands_data(const std::vector<std::optional<TensorMeta>>& inputs, const std::vector<TensorMeta>& outputs) {
  size_t in = 0, out = 0;
  for (const auto& i : inputs)
    if (i) in += checked_bytes(i->shape, dtype_size(i->dtype));
  for (const TensorMeta& o : outputs) out += checked_bytes(o.shape, dtype_size(o.dtype));
  return out > in + kFoldGrowthBytes;
}

}  // namespace

void check_input_kinds(const Kernel& kernel, const Node& node, const std::vector<std::optional<TensorMeta>>& inputs) {
  if (kernel.takes_non_tensors()) return;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i] && inputs[i]->kind != ValueKind::Tensor)
      throw TypeError(fmt::format("input {} ('{}') is a {} of {}, but {} takes tensors only", i,
                                  i < node.inputs.size() ? node.inputs[i] : "", value_kind_name(inputs[i]->kind),
                                  dtype_name(inputs[i]->dtype), node.op_type));
}

void check_string_outputs(const KernelDef* def, const Node& node, const std::vector<TensorMeta>& outputs) {
  const bool lists = def && std::find(def->dtypes.begin(), def->dtypes.end(), DType::String) != def->dtypes.end();
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].dtype == DType::String && !lists && !outputs[i].value.defined())
      throw Unsupported(fmt::format("{} makes output {} a string tensor, which it does not support", node.op_type, i));
}

const KernelDef& resolve_kernel(const Node& node, int64_t opset, const std::vector<std::optional<DType>>& dtypes) {
  return KernelRegistry::global().resolve_node(node, opset, dtypes);
}

NodeInference infer_node(const Node& node, int64_t opset, const std::vector<std::optional<TensorMeta>>& inputs) {
  bool all_known = true, any_dynamic = false;
  std::vector<std::optional<DType>> dtypes;
  dtypes.reserve(inputs.size());
  for (const auto& in : inputs) {
    dtypes.push_back(in ? std::optional<DType>(in->dtype) : std::nullopt);
    if (!in) continue;
    all_known = all_known && in->value.defined();
    any_dynamic = any_dynamic || in->dynamic;
  }
  NodeInference r;
  try {
    r.def = &resolve_kernel(node, opset, dtypes);
  } catch (const Unsupported&) {
    // A dynamic input's dtype is a guess until run time: any kernel of the op stands in until then.
    if (!any_dynamic) throw;
    for (const KernelDef& d : KernelRegistry::global().all())
      if (d.domain == node.domain && d.op_type == node.op_type && d.since_version <= opset && opset <= d.end_version) {
        r.kernel = d.create(node);
        break;
      }
    if (!r.kernel) throw;
    check_input_kinds(*r.kernel, node, inputs);
    r.outcome = NodeInference::Outcome::Dynamic;
    return r;
  }
  r.kernel = r.def->create(node);
  check_input_kinds(*r.kernel, node, inputs);
  const InferContext ictx{node, opset, inputs};
  if (!any_dynamic) {
    try {
      r.outputs = r.kernel->infer(ictx);
      check_string_outputs(r.def, node, r.outputs);
    } catch (const ValueUnknown&) {
      any_dynamic = true;  // the shape depends on data fed at run time
    }
  }
  if (any_dynamic) {
    r.outputs.clear();
    r.outcome = NodeInference::Outcome::Dynamic;
    return r;
  }
  if (r.outputs.size() < node.outputs.size())
    throw InvalidModel(
        fmt::format("the node has {} outputs but the op produces {}", node.outputs.size(), r.outputs.size()));
  bool outputs_known = true, outputs_dynamic = false;
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    const TensorMeta& m = r.outputs[i];
    // A kernel's arithmetic on shapes from the file (Expand, ConstantOfShape, Tile...) may ask for
    // a tensor no machine holds, or wrap around int64: refuse it here, naming the output.
    if (!m.dynamic) {
      try {
        checked_bytes(m.shape, dtype_size(m.dtype));
      } catch (Error& e) {
        e.add_context(fmt::format("output {} ('{}'): ", i, i < node.outputs.size() ? node.outputs[i] : ""));
        throw;
      }
    }
    outputs_known = outputs_known && m.value.defined();
    outputs_dynamic = outputs_dynamic || m.dynamic;
  }
  if (!outputs_known && all_known && r.kernel->foldable() && !outputs_dynamic && !expands_data(inputs, r.outputs)) {
    fold(r, ictx);
    outputs_known = true;
  }
  r.outcome = outputs_known ? NodeInference::Outcome::Folded : NodeInference::Outcome::Runtime;
  return r;
}

std::map<std::string, TensorMeta> infer_value_metas(const Model& model, const std::map<std::string, Tensor>& feeds) {
  std::map<std::string, TensorMeta> known;
  for (const auto& [name, t] : model.graph.initializers) {
    TensorMeta m = TensorMeta::of(t);
    m.value = t.contiguous();
    known[name] = std::move(m);
  }
  for (const auto& [name, t] : feeds) known[name] = TensorMeta::of(t);
  for (size_t index : model.graph.topological_order()) {
    const Node& node = model.graph.nodes[index];
    std::vector<std::optional<TensorMeta>> inputs;
    bool missing = false;
    for (const auto& in : node.inputs) {
      if (in.empty()) {
        inputs.emplace_back(std::nullopt);
        continue;
      }
      auto it = known.find(in);
      if (it == known.end()) {
        missing = true;  // data-dependent upstream: unknown from here on
        break;
      }
      inputs.emplace_back(it->second);
    }
    if (missing) continue;
    try {
      NodeInference r = infer_node(node, model.opset(node.domain), inputs);
      for (size_t i = 0; i < r.outputs.size() && i < node.outputs.size(); ++i)
        if (!node.outputs[i].empty() && !r.outputs[i].dynamic) known[node.outputs[i]] = std::move(r.outputs[i]);
    } catch (Error& e) {
      e.add_context(node.label() + ": ");
      throw;
    }
  }
  for (auto& [name, m] : known) m.value = Tensor();
  return known;
}

}  // namespace kiln

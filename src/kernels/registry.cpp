#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "kernels/cpu/low_precision.h"
#include "kiln/kernel.h"

namespace kiln {

std::string TensorMeta::describe() const {
  if (kind != ValueKind::Tensor) return fmt::format("{}({})", value_kind_name(kind), dtype_name(dtype));
  return fmt::format("{}{}", dtype_name(dtype), to_string(shape));
}

const TensorMeta& InferContext::input(size_t i) const {
  if (!has_input(i)) throw InvalidModel(fmt::format("input {} is required but missing", i));
  return *inputs[i];
}

const Tensor& InferContext::value(size_t i) const {
  const TensorMeta& m = input(i);
  if (!m.value.defined()) {
    const std::string name = i < node.inputs.size() ? node.inputs[i] : std::string("?");
    throw ValueUnknown(
        fmt::format("input {} ('{}') must be known before running (a constant or computed "
                    "from shapes only), but it depends on run-time data",
                    i, name));
  }
  return m.value;
}

const Tensor& ComputeContext::input(size_t i) const {
  if (!has_input(i)) throw InvalidModel(fmt::format("input {} is required but missing", i));
  return *inputs[i];
}

KernelRegistry& KernelRegistry::global() {
  static KernelRegistry registry;
  return registry;
}

void KernelRegistry::add(KernelDef def) { defs_.push_back(std::move(def)); }

namespace {

// Kernels take string tensors only where their dtypes name String: "any dtype" means any number.
bool lists_strings(const KernelDef& d) {
  return std::find(d.dtypes.begin(), d.dtypes.end(), DType::String) != d.dtypes.end();
}

}  // namespace

const KernelDef* KernelRegistry::find(const std::string& domain, const std::string& op_type, int64_t opset,
                                      DType dtype) const {
  for (const KernelDef& d : defs_) {
    if (d.domain != domain || d.op_type != op_type) continue;
    if (opset < d.since_version || opset > d.end_version) continue;
    if (!d.dtypes.empty() && std::find(d.dtypes.begin(), d.dtypes.end(), dtype) == d.dtypes.end()) continue;
    if (dtype == DType::String && !lists_strings(d)) continue;
    return &d;
  }
  return nullptr;
}

bool KernelRegistry::has_op(const std::string& domain, const std::string& op_type, int64_t opset) const {
  return std::any_of(defs_.begin(), defs_.end(), [&](const KernelDef& d) {
    return d.domain == domain && d.op_type == op_type && opset >= d.since_version && opset <= d.end_version;
  });
}

const KernelDef& KernelRegistry::resolve(const std::string& domain, const std::string& op_type, int64_t opset,
                                         DType dtype) const {
  if (const KernelDef* d = find(domain, op_type, opset, dtype)) return *d;
  const std::string dom = domain.empty() ? "ai.onnx" : domain;
  std::vector<std::string> have;
  for (const KernelDef& d : defs_) {
    if (d.domain != domain || d.op_type != op_type) continue;
    std::vector<std::string> types;
    for (DType t : d.dtypes) types.push_back(dtype_name(t));
    have.push_back(fmt::format("opset {}..{} for {}", d.since_version,
                               d.end_version == kMaxOpset ? std::string("latest") : std::to_string(d.end_version),
                               types.empty() ? std::string("any dtype") : fmt::format("{}", fmt::join(types, "/"))));
  }
  if (have.empty())
    throw Unsupported(fmt::format("op {} (domain '{}', opset {}) is not implemented by Kiln", op_type, dom, opset));
  throw Unsupported(fmt::format("op {} (domain '{}') has no kernel for opset {} and dtype {}; Kiln has {}", op_type,
                                dom, opset, dtype_name(dtype), fmt::join(have, "; ")));
}

namespace {

// An op with no 16-bit kernel runs on its float32 kernel over widened inputs, its outputs rounded
// (kernels/cpu/low_precision.h): the float32 definition found for the node with its 16-bit inputs
// seen as float32, wrapped once and kept for the process.
const KernelDef* widened(const std::vector<KernelDef>& defs, const Node& node, int64_t opset,
                         const std::vector<std::optional<DType>>& input_dtypes) {
  for (const KernelDef& d : defs) {
    if (d.domain != node.domain || d.op_type != node.op_type) continue;
    if (opset < d.since_version || opset > d.end_version || d.dtypes.empty()) continue;
    if (d.type_input >= input_dtypes.size() || !input_dtypes[d.type_input]) continue;
    const DType t = *input_dtypes[d.type_input];
    if (t != DType::BFloat16 && t != DType::Float16) continue;
    if (std::find(d.dtypes.begin(), d.dtypes.end(), DType::Float32) == d.dtypes.end()) continue;
    static std::mutex mutex;
    static std::map<const KernelDef*, KernelDef> cache;  // map nodes stay where they are
    const std::lock_guard lock(mutex);
    auto it = cache.find(&d);
    if (it == cache.end()) {
      KernelDef w = d;
      w.dtypes = {DType::BFloat16, DType::Float16};
      w.create = via_float32(d.create);
      it = cache.emplace(&d, std::move(w)).first;
    }
    return &it->second;
  }
  return nullptr;
}

}  // namespace

const KernelDef& KernelRegistry::resolve_node(const Node& node, int64_t opset,
                                              const std::vector<std::optional<DType>>& input_dtypes) const {
  std::optional<DType> first_key;
  const bool strings = std::any_of(input_dtypes.begin(), input_dtypes.end(),
                                   [](const std::optional<DType>& t) { return t == DType::String; });
  for (const KernelDef& d : defs_) {
    if (d.domain != node.domain || d.op_type != node.op_type) continue;
    if (opset < d.since_version || opset > d.end_version) continue;
    if (strings && !lists_strings(d)) {  // string elements are objects: only kernels made for them
      if (!first_key) first_key = DType::String;
      continue;
    }
    const bool has = d.type_input < input_dtypes.size() && input_dtypes[d.type_input].has_value();
    if (d.dtypes.empty()) return d;
    if (!has) continue;
    const DType t = *input_dtypes[d.type_input];
    if (!first_key) first_key = t;
    if (std::find(d.dtypes.begin(), d.dtypes.end(), t) != d.dtypes.end()) return d;
  }
  DType key = DType::Float32;
  if (first_key) key = *first_key;
  else if (!input_dtypes.empty() && input_dtypes[0]) key = *input_dtypes[0];
  if (key == DType::BFloat16 || key == DType::Float16)
    if (const KernelDef* wide = widened(defs_, node, opset, input_dtypes)) return *wide;
  return resolve(node.domain, node.op_type, opset, key);
}

namespace {
std::vector<OpDoc>& mutable_op_docs() {
  static std::vector<OpDoc> docs;
  return docs;
}
}  // namespace

const std::vector<OpDoc>& op_docs() { return mutable_op_docs(); }
OpDocRegistrar::OpDocRegistrar(OpDoc doc) { mutable_op_docs().push_back(std::move(doc)); }

KernelRegistrar::KernelRegistrar(KernelDef def, std::function<std::unique_ptr<Kernel>(const Node&)> create) {
  def.create = std::move(create);
  KernelRegistry::global().add(std::move(def));
}

}  // namespace kiln

#include "onnx/guarded_schemas.h"

#include <onnx/defs/shape_inference.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::onnxio {
namespace {

// The input that holds W, for the ops whose inference takes the kernel's rank from it.
int weight_input(const onnx::OpSchema& s) {
  const std::string& op = s.Name();
  if (op == "Conv" || op == "ConvInteger" || op == "ConvTranspose") return 1;
  if (op == "QLinearConv") return 3;
  return -1;
}

int known_rank(const onnx::InferenceContext& ctx, size_t input) {
  if (input >= ctx.getNumInputs()) return -1;
  const onnx::TypeProto* t = ctx.getInputType(input);
  if (t == nullptr || !t->has_tensor_type() || !t->tensor_type().has_shape()) return -1;
  return t->tensor_type().shape().dim_size();
}

void check_same_rank(const onnx::InferenceContext& ctx, int w) {
  const int x_rank = known_rank(ctx, 0);
  const int w_rank = known_rank(ctx, static_cast<size_t>(w));
  if (x_rank >= 0 && w_rank >= 0 && x_rank != w_rank)
    fail_shape_inference("X has rank ", x_rank, " but W has rank ", w_rank, "; a convolution needs equal ranks");
}

// convPoolShapeInference divides by every stride: a stride of 0 was an integer division by zero
// (SIGFPE) inside libonnx, found by the fuzzer on a MaxPool.
void check_positive(const onnx::InferenceContext& ctx, const char* name) {
  const onnx::AttributeProto* a = ctx.getAttribute(name);
  if (a == nullptr) return;
  for (const int64_t v : a->ints())
    if (v <= 0) fail_shape_inference("attribute '", name, "' holds ", v, "; every value must be positive");
}

// MaxUnpool's inference reads dimension 1 of its second input without checking that it has one.
void check_unpool_indices(const onnx::InferenceContext& ctx) {
  if (known_rank(ctx, 0) >= 0 && known_rank(ctx, 1) < 2)
    fail_shape_inference("MaxUnpool's indices need a known shape of rank 2 or more");
}

bool has_attribute(const onnx::OpSchema& s, const char* name) { return s.attributes().count(name) > 0; }

// The checks one schema's inference runs first; empty for the schemas left as they are.
std::vector<std::function<void(const onnx::InferenceContext&)>> guards_for(const onnx::OpSchema& s) {
  std::vector<std::function<void(const onnx::InferenceContext&)>> guards;
  if (s.domain() != onnx::ONNX_DOMAIN) return guards;
  if (const int w = weight_input(s); w >= 0)
    guards.emplace_back([w](const onnx::InferenceContext& ctx) { check_same_rank(ctx, w); });
  for (const char* name : {"strides", "dilations"})
    if (has_attribute(s, name))
      guards.emplace_back([name](const onnx::InferenceContext& ctx) { check_positive(ctx, name); });
  if (s.Name() == "MaxUnpool") guards.emplace_back(check_unpool_indices);
  return guards;
}

class GuardedRegistry final : public onnx::ISchemaRegistry {
 public:
  const onnx::OpSchema* GetSchema(const std::string& key, const int max_version,
                                  const std::string& domain) const override {
    const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(key, max_version, domain);
    if (schema == nullptr) return nullptr;
    const std::lock_guard lock(mutex_);
    const auto found = guarded_.find(schema);
    if (found != guarded_.end()) return found->second ? found->second.get() : schema;
    auto guards = guards_for(*schema);
    std::unique_ptr<onnx::OpSchema>& guarded = guarded_[schema];
    if (guards.empty()) return schema;
    guarded = std::make_unique<onnx::OpSchema>(*schema);
    const onnx::InferenceFunction inner = schema->GetTypeAndShapeInferenceFunction();
    guarded->TypeAndShapeInferenceFunction([inner, guards = std::move(guards)](onnx::InferenceContext& ctx) {
      for (const auto& guard : guards) guard(ctx);
      if (inner) inner(ctx);
    });
    return guarded.get();
  }

 private:
  mutable std::mutex mutex_;
  mutable std::map<const onnx::OpSchema*, std::unique_ptr<onnx::OpSchema>> guarded_;
};

}  // namespace

const onnx::ISchemaRegistry* guarded_schema_registry() {
  static const GuardedRegistry registry;
  return &registry;
}

}  // namespace kiln::onnxio

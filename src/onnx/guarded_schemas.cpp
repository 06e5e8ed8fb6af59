#include "onnx/guarded_schemas.h"

#include <onnx/defs/shape_inference.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace kiln::onnxio {
namespace {

// The input that holds W, for the ops whose inference takes the kernel's rank from it.
int weight_input(const onnx::OpSchema& s) {
  if (s.domain() != onnx::ONNX_DOMAIN) return -1;
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

class GuardedRegistry final : public onnx::ISchemaRegistry {
 public:
  const onnx::OpSchema* GetSchema(const std::string& key, const int max_version,
                                  const std::string& domain) const override {
    const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(key, max_version, domain);
    if (schema == nullptr) return nullptr;
    const int w = weight_input(*schema);
    if (w < 0) return schema;
    const std::lock_guard lock(mutex_);
    std::unique_ptr<onnx::OpSchema>& guarded = guarded_[schema];
    if (!guarded) {
      guarded = std::make_unique<onnx::OpSchema>(*schema);
      const onnx::InferenceFunction inner = schema->GetTypeAndShapeInferenceFunction();
      guarded->TypeAndShapeInferenceFunction([inner, w](onnx::InferenceContext& ctx) {
        check_same_rank(ctx, w);
        if (inner) inner(ctx);
      });
    }
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

// Linear and Embedding: torch.nn's parameters, initialisation and exported ONNX.
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "kiln/nn/layers.h"
#include "models/nn/layer_util.h"

namespace kiln::nn {

using detail::shape_text;

namespace {
void check_size(const std::string& module, const char* what, int64_t v) {
  if (v < 0) throw InvalidArgument(fmt::format("{}: {} must be non-negative, got {}", module, what, v));
}
}  // namespace

// ---- Linear ----------------------------------------------------------------------------------------

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : in_features_(in_features), out_features_(out_features), bias_(bias) {
  check_size("Linear", "in_features", in_features);
  check_size("Linear", "out_features", out_features);
  register_parameter("weight", Tensor::zeros(DType::Float32, {out_features, in_features}));
  if (bias) register_parameter("bias", Tensor::zeros(DType::Float32, {out_features}));
  reset_parameters();
}

void Linear::reset_parameters() {
  Tensor& w = get_parameter("weight");
  if (w.numel() > 0) kaiming_uniform_(w, std::sqrt(5.0));  // torch: a no-op on zero elements
  if (!bias_) return;
  // torch: bound = 1/sqrt(fan_in) if fan_in > 0 else 0
  const int64_t fan_in = fan_in_and_fan_out(w).first;
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
  uniform_(get_parameter("bias"), -bound, bound);
}

std::vector<Var> Linear::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& x = detail::single_input(*this, inputs);
  const Var w = t.parameter(*this, "weight");
  detail::require_dtype(*this, x, w);
  if (x.rank() < 1)
    throw ShapeError(
        fmt::format("Linear: input '{}' is a scalar; it needs a last dim of in_features={}", x.name, in_features_));
  const int64_t features = x.dim(-1);
  if (features >= 0 && features != in_features_)
    throw ShapeError(
        fmt::format("Linear: input '{}' of shape {} has {} features in its last dim, but in_features={} "
                    "(torch: mat1 and mat2 shapes cannot be multiplied)",
                    x.name, shape_text(x.shape), features, in_features_));
  std::vector<int64_t> out_shape = x.shape;
  out_shape.back() = out_features_;
  if (x.rank() == 2) {
    std::vector<Var> in{x, w};
    if (bias_) in.push_back(t.parameter(*this, "bias"));
    return {t.op(
        "Gemm", in,
        {{"alpha", Attribute::of_float(1.f)}, {"beta", Attribute::of_float(1.f)}, {"transB", Attribute::of_int(1)}},
        x.dtype, out_shape)};
  }
  // Rank != 2: torch.onnx exports MatMul with the transposed weight (plus Add for the bias).
  const Var wt = t.op("Transpose", {w}, {{"perm", detail::ints({1, 0})}}, w.dtype, {in_features_, out_features_});
  Var y = t.op("MatMul", {x, wt}, {}, x.dtype, out_shape);
  if (bias_) y = t.op("Add", {y, t.parameter(*this, "bias")}, {}, x.dtype, out_shape);
  return {y};
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features_, out_features_, detail::py_bool(bias_));
}

// ---- Embedding ---------------------------------------------------------------------------------------

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx)
    : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {
  check_size("Embedding", "num_embeddings", num_embeddings);
  check_size("Embedding", "embedding_dim", embedding_dim);
  if (padding_idx) {
    // torch's asserts, and its normalisation of a negative index
    if (*padding_idx >= num_embeddings || *padding_idx < -num_embeddings)
      throw InvalidArgument(
          fmt::format("Embedding: Padding_idx must be within num_embeddings (padding_idx={}, "
                      "num_embeddings={})",
                      *padding_idx, num_embeddings));
    padding_idx_ = *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
  }
  register_parameter("weight", Tensor::zeros(DType::Float32, {num_embeddings, embedding_dim}));
  reset_parameters();
}

void Embedding::reset_parameters() {
  Tensor& w = get_parameter("weight");
  normal_(w, 0.0, 1.0);
  if (!padding_idx_) return;
  float* row = w.data<float>() + *padding_idx_ * embedding_dim_;
  for (int64_t j = 0; j < embedding_dim_; ++j) row[j] = 0.f;
}

void Embedding::share_weight(std::shared_ptr<Embedding> owner) {
  if (!owner || owner.get() == this) throw InvalidArgument("Embedding::share_weight: needs another Embedding");
  if (owner->num_embeddings_ != num_embeddings_ || owner->embedding_dim_ != embedding_dim_)
    throw ShapeError(fmt::format("Embedding::share_weight: this embedding is ({}, {}), the owner's ({}, {})",
                                 num_embeddings_, embedding_dim_, owner->num_embeddings_, owner->embedding_dim_));
  while (owner->weight_owner_) owner = owner->weight_owner_;
  get_parameter("weight") = owner->get_parameter("weight");
  weight_owner_ = std::move(owner);
}

std::vector<Var> Embedding::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& idx = detail::single_input(*this, inputs);
  if (idx.dtype != DType::Int64 && idx.dtype != DType::Int32)
    throw TypeError(
        fmt::format("Embedding: expected indices '{}' to have one of the following scalar types: "
                    "int64, int32; but got {}{}",
                    idx.name, dtype_name(idx.dtype), shape_text(idx.shape)));
  const Var w = t.parameter(weight_owner_ ? *weight_owner_ : *this, "weight");
  std::vector<int64_t> out_shape = idx.shape;
  out_shape.push_back(embedding_dim_);
  const Var rows = t.op("Gather", {w, idx}, {{"axis", Attribute::of_int(0)}}, w.dtype, out_shape);
  if (!padding_idx_ || !training()) return {rows};
  // torch never sends a gradient to the padding row: in training mode the rows read at positions
  // holding padding_idx pass through ai.kiln.StopGradient, so the generated training graph leaves
  // the row out of the gradient (it still changes through other uses of a tied matrix, such as a
  // language model's head, and the forward reads its current value).
  std::vector<int64_t> mask_shape = idx.shape;
  mask_shape.push_back(1);
  const Var pad = t.op("Equal",
                       {idx, t.constant(idx.dtype == DType::Int64 ? Tensor::scalar<int64_t>(*padding_idx_)
                                                                  : Tensor::scalar<int32_t>(int32_t(*padding_idx_)),
                                        "padding_idx")},
                       {}, DType::Bool, idx.shape);
  const Var mask = t.op("Unsqueeze", {pad, t.constant_ints({-1}, "axes")}, {}, DType::Bool, mask_shape);
  return {t.op("Where", {mask, t.stop_gradient(rows), rows}, {}, w.dtype, out_shape)};
}

std::string Embedding::extra_repr() const {
  std::string s = fmt::format("{}, {}", num_embeddings_, embedding_dim_);
  if (padding_idx_) s += fmt::format(", padding_idx={}", *padding_idx_);
  return s;
}

}  // namespace kiln::nn

// BatchNorm1d/2d, LayerNorm and GroupNorm: torch.nn's parameters and buffers, and the ONNX torch's
// exporter writes for them in training and eval mode.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "kiln/nn/layers.h"
#include "models/nn/layer_util.h"

namespace kiln::nn {

using detail::py_bool;
using detail::py_float;
using detail::shape_text;

namespace {

Tensor filled(DType dtype, const Shape& shape, double value) {
  Tensor t = Tensor::empty(dtype, shape);
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = from_double<T>(value);
  });
  return t;
}

// A per-channel vector [C] shaped [C, 1, ..., 1] to broadcast over x = [N, C, *] (x's rank).
Var per_channel(Tracer& t, const Var& v, int64_t rank) {
  if (rank <= 2) return v;
  std::vector<int64_t> axes(size_t(rank - 2)), shape{v.shape[0]};
  std::iota(axes.begin(), axes.end(), 1);
  shape.resize(size_t(rank - 1), 1);
  return t.op("Unsqueeze", {v, t.constant_ints(axes, "axes")}, {}, v.dtype, shape);
}

void check_channels(const Module& m, const Var& x, int64_t expected) {
  const int64_t c = x.dim(1);
  if (c >= 0 && c != expected)
    throw ShapeError(fmt::format("{}: input '{}' {} has {} channels (dim 1), but the module has {}", m.type_name(),
                                 x.name, shape_text(x.shape), c, expected));
}

}  // namespace

// ---- BatchNorm -------------------------------------------------------------------------------------

BatchNorm::BatchNorm(std::string name, std::vector<int64_t> ranks, int64_t num_features, double eps, double momentum,
                     bool affine, bool track_running_stats)
    : name_(std::move(name)),
      ranks_(std::move(ranks)),
      num_features_(num_features),
      eps_(eps),
      momentum_(momentum),
      affine_(affine),
      track_running_stats_(track_running_stats) {
  if (num_features < 0)
    throw InvalidArgument(fmt::format("{}: num_features must be non-negative, got {}", name_, num_features));
  if (!(eps > 0)) throw InvalidArgument(fmt::format("{}: eps must be positive, got {}", name_, eps));
  if (affine) {
    register_parameter("weight", Tensor::zeros(DType::Float32, {num_features}));
    register_parameter("bias", Tensor::zeros(DType::Float32, {num_features}));
  }
  if (track_running_stats) {
    register_buffer("running_mean", Tensor::zeros(DType::Float32, {num_features}));
    register_buffer("running_var", Tensor::zeros(DType::Float32, {num_features}));
    register_buffer("num_batches_tracked", Tensor::scalar<int64_t>(0));
  }
  reset_parameters();
}

void BatchNorm::reset_running_stats() {
  if (!track_running_stats_) return;
  for (auto& [name, t] : named_buffers(false)) {
    if (name == "running_mean") constant_(*t, 0.0);
    if (name == "running_var") constant_(*t, 1.0);
    if (name == "num_batches_tracked") t->data<int64_t>()[0] = 0;  // int64: not for nn::init
  }
}

void BatchNorm::reset_parameters() {
  reset_running_stats();
  if (!affine_) return;
  constant_(get_parameter("weight"), 1.0);
  constant_(get_parameter("bias"), 0.0);
}

std::vector<Var> BatchNorm::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& x = detail::single_input(*this, inputs);
  detail::require_float(*this, x);
  if (std::find(ranks_.begin(), ranks_.end(), x.rank()) == ranks_.end())
    throw ShapeError(fmt::format("{}: expected {}D input (got {}D input '{}' {})", name_, fmt::join(ranks_, "D or "),
                                 x.rank(), x.name, shape_text(x.shape)));
  check_channels(*this, x, num_features_);
  const Shape c{num_features_};
  const Var scale = affine_ ? t.parameter(*this, "weight") : t.constant(filled(x.dtype, c, 1.0), "ones");
  const Var shift = affine_ ? t.parameter(*this, "bias") : t.constant(filled(x.dtype, c, 0.0), "zeros");
  if (affine_) detail::require_dtype(*this, x, scale);

  if (track_running_stats_) {
    const Var mean = t.parameter(*this, "running_mean"), var = t.parameter(*this, "running_var");
    std::map<std::string, Attribute> attrs{{"epsilon", Attribute::of_float(float(eps_))}};
    if (!training()) return {t.op("BatchNormalization", {x, scale, shift, mean, var}, attrs, x.dtype, x.shape)};
    // Training mode as torch exports it: batch statistics, and the updated running statistics as
    // outputs 1 and 2 (the Tracer reports them as buffer updates). ONNX's momentum weighs the old
    // value, torch's the new one.
    attrs["momentum"] = Attribute::of_float(float(1.0 - momentum_));
    attrs["training_mode"] = Attribute::of_int(1);
    return {t.op_multi("BatchNormalization", {x, scale, shift, mean, var}, attrs,
                       {{x.dtype, x.shape}, {mean.dtype, c}, {var.dtype, c}})[0]};
  }

  // No running statistics: batch statistics in both modes, spelled out so that no inference-mode
  // rewrite (eval artifacts) can swap in constants.
  std::vector<int64_t> axes{0}, stat_shape(size_t(x.rank()), 1);
  for (int64_t i = 2; i < x.rank(); ++i) axes.push_back(i);
  stat_shape[1] = num_features_;
  const std::map<std::string, Attribute> reduce{{"axes", detail::ints(axes)}, {"keepdims", Attribute::of_int(1)}};
  const Var mean = t.op("ReduceMean", {x}, reduce, x.dtype, stat_shape);
  const Var centred = t.op("Sub", {x, mean}, {}, x.dtype, x.shape);
  const Var sq = t.op("Mul", {centred, centred}, {}, x.dtype, x.shape);
  const Var var = t.op("ReduceMean", {sq}, reduce, x.dtype, stat_shape);
  const Var eps = t.constant_scalar(eps_, x.dtype, "eps");
  const Var std = t.op("Sqrt", {t.op("Add", {var, eps}, {}, x.dtype, stat_shape)}, {}, x.dtype, stat_shape);
  Var y = t.op("Div", {centred, std}, {}, x.dtype, x.shape);
  if (!affine_) return {y};
  y = t.op("Mul", {y, per_channel(t, scale, x.rank())}, {}, x.dtype, x.shape);
  return {t.op("Add", {y, per_channel(t, shift, x.rank())}, {}, x.dtype, x.shape)};
}

std::string BatchNorm::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features_, py_float(eps_),
                     py_float(momentum_), py_bool(affine_), py_bool(track_running_stats_));
}

// ---- LayerNorm -------------------------------------------------------------------------------------

LayerNorm::LayerNorm(std::vector<int64_t> normalized_shape, double eps, bool elementwise_affine, bool bias)
    : normalized_shape_(std::move(normalized_shape)),
      eps_(eps),
      elementwise_affine_(elementwise_affine),
      bias_(bias && elementwise_affine) {
  if (normalized_shape_.empty()) throw InvalidArgument("LayerNorm: normalized_shape must name at least one dim");
  for (int64_t d : normalized_shape_)
    if (d <= 0)
      throw InvalidArgument(
          fmt::format("LayerNorm: normalized_shape {} must have positive dims", shape_text(normalized_shape_)));
  if (!(eps > 0)) throw InvalidArgument(fmt::format("LayerNorm: eps must be positive, got {}", eps));
  if (elementwise_affine_) {
    register_parameter("weight", Tensor::zeros(DType::Float32, normalized_shape_));
    if (bias_) register_parameter("bias", Tensor::zeros(DType::Float32, normalized_shape_));
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (!elementwise_affine_) return;
  constant_(get_parameter("weight"), 1.0);
  if (bias_) constant_(get_parameter("bias"), 0.0);
}

std::vector<Var> LayerNorm::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& x = detail::single_input(*this, inputs);
  detail::require_float(*this, x);
  const int64_t k = int64_t(normalized_shape_.size());
  bool fits = x.rank() >= k;
  for (int64_t i = 0; fits && i < k; ++i) {
    const int64_t d = x.shape[size_t(x.rank() - k + i)];
    fits = d < 0 || d == normalized_shape_[size_t(i)];
  }
  if (!fits)
    throw ShapeError(
        fmt::format("LayerNorm: Given normalized_shape={}, expected input with shape [*, {}], but got "
                    "input '{}' of size {}",
                    shape_text(normalized_shape_), fmt::join(normalized_shape_, ", "), x.name, shape_text(x.shape)));
  std::vector<Var> in{x};
  if (elementwise_affine_) {
    in.push_back(t.parameter(*this, "weight"));
    detail::require_dtype(*this, x, in.back());
    if (bias_) in.push_back(t.parameter(*this, "bias"));
  } else {
    in.push_back(t.constant(filled(x.dtype, normalized_shape_, 1.0), "ones"));  // Scale is required
  }
  return {t.op("LayerNormalization", in,
               {{"axis", Attribute::of_int(-k)}, {"epsilon", Attribute::of_float(float(eps_))}}, x.dtype, x.shape)};
}

std::string LayerNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", detail::py_tuple(normalized_shape_), py_float(eps_),
                     py_bool(elementwise_affine_));
}

// ---- GroupNorm -------------------------------------------------------------------------------------

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : num_groups_(num_groups), num_channels_(num_channels), eps_(eps), affine_(affine) {
  if (num_groups <= 0) throw InvalidArgument(fmt::format("GroupNorm: num_groups must be positive, got {}", num_groups));
  if (num_channels < 0 || num_channels % num_groups != 0)
    throw InvalidArgument(
        fmt::format("GroupNorm: num_channels must be divisible by num_groups (num_channels={}, "
                    "num_groups={})",
                    num_channels, num_groups));
  if (!(eps > 0)) throw InvalidArgument(fmt::format("GroupNorm: eps must be positive, got {}", eps));
  if (affine) {
    register_parameter("weight", Tensor::zeros(DType::Float32, {num_channels}));
    register_parameter("bias", Tensor::zeros(DType::Float32, {num_channels}));
  }
  reset_parameters();
}

void GroupNorm::reset_parameters() {
  if (!affine_) return;
  constant_(get_parameter("weight"), 1.0);
  constant_(get_parameter("bias"), 0.0);
}

std::vector<Var> GroupNorm::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& x = detail::single_input(*this, inputs);
  detail::require_float(*this, x);
  if (x.rank() < 2)
    throw ShapeError(fmt::format("GroupNorm: Expected at least 2 dimensions for input tensor but received {} ('{}' {})",
                                 x.rank(), x.name, shape_text(x.shape)));
  check_channels(*this, x, num_channels_);
  // Each (sample, group) normalised over its channels and positions: InstanceNormalization of
  // [N, G, C/G * spatial] with unit scale and zero shift.
  int64_t per_group = num_channels_ / num_groups_;
  for (int64_t i = 2; i < x.rank(); ++i)
    per_group = x.shape[size_t(i)] < 0 || per_group < 0 ? -1 : per_group * x.shape[size_t(i)];
  const std::vector<int64_t> grouped{x.dim(0), num_groups_, per_group};
  const Var r = t.op("Reshape", {x, t.constant_ints({0, num_groups_, -1}, "shape")}, {}, x.dtype, grouped);
  const Shape g{num_groups_};
  const Var normed =
      t.op("InstanceNormalization",
           {r, t.constant(filled(x.dtype, g, 1.0), "ones"), t.constant(filled(x.dtype, g, 0.0), "zeros")},
           {{"epsilon", Attribute::of_float(float(eps_))}}, x.dtype, grouped);
  // Back to x's shape: a constant (0 copies the batch dim) unless a later dim is dynamic.
  const bool static_tail = std::all_of(x.shape.begin() + 1, x.shape.end(), [](int64_t d) { return d >= 0; });
  Var shape;
  if (static_tail) {
    std::vector<int64_t> dims = x.shape;
    dims[0] = 0;
    shape = t.constant_ints(dims, "shape");
  } else {
    shape = t.op("Shape", {x}, {}, DType::Int64, {x.rank()});
  }
  Var y = t.op("Reshape", {normed, shape}, {}, x.dtype, x.shape);
  if (!affine_) return {y};
  const Var w = t.parameter(*this, "weight");
  detail::require_dtype(*this, x, w);
  y = t.op("Mul", {y, per_channel(t, w, x.rank())}, {}, x.dtype, x.shape);
  return {t.op("Add", {y, per_channel(t, t.parameter(*this, "bias"), x.rank())}, {}, x.dtype, x.shape)};
}

std::string GroupNorm::extra_repr() const {
  return fmt::format("{}, {}, eps={}, affine={}", num_groups_, num_channels_, py_float(eps_), py_bool(affine_));
}

}  // namespace kiln::nn

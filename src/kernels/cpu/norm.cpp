// BatchNormalization in inference mode (running statistics): Y = scale * (X - mean) /
// sqrt(var + epsilon) + B per channel, on oneDNN's batch_normalization_forward with global stats for
// float32 and a plain loop for float64 and float16. Opsets 14 and 15 let the statistics (and from
// 15 also scale and B) have their own float dtype; those are converted to X's once per run.
// InstanceNormalization: the same formula with each (sample, channel)'s own mean and variance.
#include <fmt/format.h>

#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/dnnl_common.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

std::string describe(const TensorMeta& m) { return fmt::format("{}{}", dtype_name(m.dtype), to_string(m.shape)); }

// Validates X and its per-channel parameters for the node's opset; returns X as [N, C, rest].
Shape batch_norm_shape(const Node& node, const InferContext& ctx) {
  if (node.attr_int("training_mode", 0) != 0)
    throw Unsupported("BatchNormalization: training_mode=1 (normalising by batch statistics and updating the "
                      "running ones) is not supported yet; export the model in inference (eval) mode");
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (!node.outputs[i].empty())
      throw Unsupported(fmt::format("BatchNormalization: output {} ('{}') exists only in training mode, which is "
                                    "not supported yet; export the model in inference (eval) mode",
                                    i, node.outputs[i]));
  if (node.attr_int("spatial", 1) != 1)
    throw Unsupported("BatchNormalization: spatial=0 (per-activation statistics) is not supported");
  const TensorMeta& x = ctx.input(0);
  if (x.shape.size() < 2)
    throw ShapeError(fmt::format("BatchNormalization: input X {} must be [N, C, ...]", describe(x)));
  static const char* names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (size_t i = 1; i < 5; ++i) {
    const TensorMeta& p = ctx.input(i);
    // Opset 14 types the statistics separately (U), opset 15 also scale and B (T1); all floats.
    const bool own_type = (ctx.opset >= 14 && i >= 3) || ctx.opset >= 15;
    if (own_type ? !is_floating(p.dtype) : p.dtype != x.dtype)
      throw TypeError(fmt::format("BatchNormalization: {} {} must {} (opset {})", names[i], describe(p),
                                  own_type ? "be a float type" : fmt::format("have the dtype of X {}", describe(x)),
                                  ctx.opset));
    if (p.shape != Shape{x.shape[1]})
      throw ShapeError(fmt::format("BatchNormalization: {} {} must be [{}], one value per channel of X {}", names[i],
                                   describe(p), x.shape[1], describe(x)));
  }
  // Statistics are per channel whatever the spatial rank.
  int64_t rest = 1;
  for (size_t i = 2; i < x.shape.size(); ++i) rest *= x.shape[i];
  return {x.shape[0], x.shape[1], rest};
}

// A parameter in dtype T: the tensor itself when it already is, else a converted copy.
template <class T>
Tensor as_dtype(const Tensor& t) {
  if (t.dtype() == dtype_of<T>) return t;
  Tensor out = Tensor::empty(dtype_of<T>, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) out.data<T>()[i] = from_double<T>(t.item_as_double(i));
  return out;
}

class BatchNormF32 final : public Kernel {
 public:
  using Kernel::Kernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    data_ = batch_norm_shape(node_, ctx);
    built_ = false;
    const TensorMeta& x = ctx.input(0);
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }

  void prepare(const InferContext&, const std::vector<TensorMeta>&) override { build(); }

  void compute(ComputeContext& ctx) override {
    if (!built_) build();
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    const dnnl::memory::desc data = dnnl_util::plain_desc(data_), channel = dnnl_util::plain_desc({data_[1]});
    dnnl_util::execute(prim_,
                       {{DNNL_ARG_SRC, dnnl_util::memory_of(data, ctx.input(0))},
                        {DNNL_ARG_SCALE, dnnl_util::memory_of(channel, as_dtype<float>(ctx.input(1)))},
                        {DNNL_ARG_SHIFT, dnnl_util::memory_of(channel, as_dtype<float>(ctx.input(2)))},
                        {DNNL_ARG_MEAN, dnnl_util::memory_of(channel, as_dtype<float>(ctx.input(3)))},
                        {DNNL_ARG_VARIANCE, dnnl_util::memory_of(channel, as_dtype<float>(ctx.input(4)))},
                        {DNNL_ARG_DST, dnnl_util::memory_of(data, y)}},
                       "batch normalization");
  }

 private:
  void build() {
    built_ = true;
    if (numel(data_) == 0) return;
    const float epsilon = node_.attr_float("epsilon", 1e-5f);
    // Separate scale and shift flags (oneDNN >= 2.3) read ONNX's scale and B in place, where
    // use_scale_shift would need them packed into one [2, C] buffer first.
    const auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
                       dnnl::normalization_flags::use_shift;
    prim_ = dnnl_util::checked(fmt::format("build a batch normalization for float{}", to_string(data_)), [&] {
      dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_inference, dnnl_util::plain_desc(data_),
                                                epsilon, flags);
      return dnnl::batch_normalization_forward(
          dnnl::batch_normalization_forward::primitive_desc(d, dnnl_util::engine()));
    });
  }

  Shape data_;
  bool built_ = false;
  dnnl::batch_normalization_forward prim_;
};

// float64 and float16 (computed in double): y = x * a + b per channel with a = scale / sqrt(var +
// eps), b = B - mean * a.
class BatchNormPlain final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    data_ = batch_norm_shape(node_, ctx);
    const TensorMeta& x = ctx.input(0);
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const double eps = node_.attr_float("epsilon", 1e-5f);
    const int64_t c = data_[1], rest = data_[2];
    std::vector<double> a(static_cast<size_t>(c)), b(static_cast<size_t>(c));
    for (int64_t i = 0; i < c; ++i) {
      a[size_t(i)] = ctx.input(1).item_as_double(i) / std::sqrt(ctx.input(4).item_as_double(i) + eps);
      b[size_t(i)] = ctx.input(2).item_as_double(i) - ctx.input(3).item_as_double(i) * a[size_t(i)];
    }
    Tensor& y = ctx.output(0);
    visit_dtype(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, double> || std::is_same_v<T, Half>) {
        const T* px = ctx.input(0).data<T>();
        T* py = y.data<T>();
        parallel_for(data_[0] * c, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, rest)), [&](int64_t s, int64_t e) {
          for (int64_t plane = s; plane < e; ++plane) {
            const double ac = a[size_t(plane % c)], bc = b[size_t(plane % c)];
            for (int64_t i = plane * rest; i < (plane + 1) * rest; ++i) py[i] = from_double<T>(to_double(px[i]) * ac + bc);
          }
        });
      } else {
        throw Unsupported(fmt::format("BatchNormalization: {} input", dtype_name(y.dtype())));
      }
    });
  }

 private:
  Shape data_;
};

// InstanceNormalization: per (n, c) plane, y = scale[c] * (x - mean) / sqrt(var + eps) + B[c].
class InstanceNormKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    if (x.shape.size() < 3)
      throw ShapeError(fmt::format("InstanceNormalization: input {} must be [N, C, D1, ...] (rank >= 3)", describe(x)));
    static const char* names[] = {"input", "scale", "B"};
    for (size_t i = 1; i < 3; ++i) {
      const TensorMeta& p = ctx.input(i);
      if (p.dtype != x.dtype || p.shape != Shape{x.shape[1]})
        throw ShapeError(fmt::format("InstanceNormalization: {} {} must be {}[{}], one value per channel of input {}",
                                     names[i], describe(p), dtype_name(x.dtype), x.shape[1], describe(x)));
    }
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    Tensor& y = ctx.output(0);
    visit_dtype(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half>)
        run<T>(ctx.input(0), ctx.input(1), ctx.input(2), y);
      else
        throw Unsupported(fmt::format("InstanceNormalization: {} input", dtype_name(y.dtype())));
    });
  }

 private:
  template <class T>
  void run(const Tensor& x, const Tensor& scale, const Tensor& bias, Tensor& y) const {
    const int64_t c = x.dim(1), plane = x.numel() / std::max<int64_t>(1, x.dim(0) * c);
    const double eps = node_.attr_float("epsilon", 1e-5f);
    const T* px = x.data<T>();
    const T* ps = scale.data<T>();
    const T* pb = bias.data<T>();
    T* py = y.data<T>();
    parallel_for(x.dim(0) * c, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, plane)), [&](int64_t s, int64_t e) {
      for (int64_t p = s; p < e; ++p) {
        const T* xp = px + p * plane;
        T* yp = py + p * plane;
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < plane; ++i) sum += to_double(xp[i]);
        const double mean = sum / double(plane);
        for (int64_t i = 0; i < plane; ++i) sq += (to_double(xp[i]) - mean) * (to_double(xp[i]) - mean);
        const double a = to_double(ps[p % c]) / std::sqrt(sq / double(plane) + eps);
        const double b = to_double(pb[p % c]) - mean * a;
        for (int64_t i = 0; i < plane; ++i) yp[i] = from_double<T>(to_double(xp[i]) * a + b);
      }
    });
  }
};

const KernelRegistrar batch_norm_plain({"", "BatchNormalization", 7, kMaxOpset, {DType::Float64, DType::Float16}},
                                       [](const Node& n) { return std::make_unique<BatchNormPlain>(n); });
const KernelRegistrar instance_norm({"", "InstanceNormalization", 6, kMaxOpset,
                                     {DType::Float32, DType::Float64, DType::Float16}},
                                    [](const Node& n) { return std::make_unique<InstanceNormKernel>(n); });
const KernelRegistrar batch_norm_f32({"", "BatchNormalization", 7, kMaxOpset, {DType::Float32}},
                                     [](const Node& n) { return std::make_unique<BatchNormF32>(n); });

}  // namespace
}  // namespace kiln

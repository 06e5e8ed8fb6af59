// Gradient kernels of BatchNormalization and InstanceNormalization (ai.kiln domain); the rules that
// emit them are in autodiff/norm.cpp. Both view X as [N, C, rest] with one scale per channel; they
// differ in which elements share statistics: a channel over the batch (batch norm in training
// mode), or one (sample, channel) plane (instance norm). With x^ = (x - mean) * inv_std over a
// group of M elements and y = scale * x^ + B:
//   dB = sum dy,  dScale = sum dy * x^,  dx = scale * inv_std / M * (M * dy - dB_g - x^ * dScale_g)
// where dB_g and dScale_g are the sums over the group. Sums run in double, one channel (or plane)
// per thread.
#include <fmt/format.h>

#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/norm_layout.h"
#include "kernels/cpu/statistics_reduce.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

Shape ncr(const Shape& x) {
  int64_t rest = 1;
  for (size_t i = 2; i < x.size(); ++i) rest *= x[i];
  return {x[0], x[1], rest};
}

// Checks dY against X and the per-channel inputs (channels along axis `channel` of X); returns
// outputs dX (X's dtype), dScale, dB (scale's dtype).
std::vector<TensorMeta> grad_outputs(const InferContext& ctx, const char* op, size_t last_channel_input,
                                     size_t channel = 1) {
  const TensorMeta& dy = ctx.input(0);
  const TensorMeta& x = ctx.input(1);
  if (x.shape.size() < 2 || dy.shape != x.shape || dy.dtype != x.dtype)
    throw ShapeError(fmt::format("{}: dY {} must match X {} (rank >= 2)", op, dy.describe(), x.describe()));
  for (size_t i = 2; i <= last_channel_input; ++i)
    if (ctx.has_input(i) && (ctx.shape(i) != Shape{x.shape[channel]} || !is_floating(ctx.dtype(i))))
      throw ShapeError(fmt::format("{}: input {} {} must be a float [{}], one value per channel of X {}", op, i,
                                   ctx.input(i).describe(), x.shape[channel], x.describe()));
  const TensorMeta& scale = ctx.input(2);
  return {{x.dtype, x.shape, x.dynamic, Tensor()},
          {scale.dtype, scale.shape, false, Tensor()},
          {scale.dtype, scale.shape, false, Tensor()}};
}

template <class F>
void visit_float(DType dt, const char* op, F&& f) {
  visit_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half>) f(tag);
    else throw TypeError(fmt::format("{}: {} tensors are not supported", op, dtype_name(dt)));
  });
}

std::vector<double> doubles(const Tensor* t, int64_t n) {
  std::vector<double> v(size_t(n), 0.0);
  if (t)
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = t->item_as_double(i);
  return v;
}

void write_doubles(Tensor& t, const std::vector<double>& v) {
  visit_float(t.dtype(), "normalization gradient", [&](auto tag) {
    using T = decltype(tag);
    for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = from_double<T>(v[i]);
  });
}

// ---------------------------------------------------------------------------------------------
// BatchNormalizationGrad(dY, X, scale, mean?, inv_std?, dRunningMean?, dRunningVar?), and
// BatchNormalizationGradChannelsLast: the same over 2-D maps held channels last ([N, H, W, C]).

class BatchNormGradKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    training_ = node_.attr_int("training_mode", 1) != 0;
    if (!training_ && (!ctx.has_input(3) || !ctx.has_input(4)))
      throw InvalidModel("BatchNormalizationGrad: inference mode (training_mode=0) needs mean and inv_std inputs");
    if (channels_last_ && ctx.shape(1).size() != 4)
      throw ShapeError(fmt::format("{}: X {} must have rank 4 ([N, H, W, C])", node_.label(), ctx.input(1).describe()));
    return grad_outputs(ctx, node_.op_type.c_str(), 6, channels_last_ ? 3 : 1);
  }

  // In phases over the channels: the statistics when the node has none (their sums over the
  // ranks with synchronized statistics, statistics_reduce.h), the gradient's two sums (dScale and
  // dB are this rank's; dX takes the sums over every rank's batch, as torch's SyncBatchNorm), dX.
  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(1);
    const Shape& xs = x.shape();
    const Shape d = channels_last_ ? Shape{xs[0], xs[3], xs[1] * xs[2]} : ncr(xs);
    const int64_t n = d[0], c = d[1], rest = d[2];
    const double eps = node_.attr_float("epsilon", 1e-5f), momentum = node_.attr_float("momentum", 0.9f);
    const std::vector<double> scale = doubles(&ctx.input(2), c);
    std::vector<double> mean = doubles(ctx.has_input(3) ? &ctx.input(3) : nullptr, c);
    std::vector<double> inv = doubles(ctx.has_input(4) ? &ctx.input(4) : nullptr, c);
    const bool recompute = training_ && !(ctx.has_input(3) && ctx.has_input(4));
    const bool has_drm = ctx.has_input(5), has_drv = ctx.has_input(6);
    const std::vector<double> drm = doubles(has_drm ? &ctx.input(5) : nullptr, c);
    const std::vector<double> drv = doubles(has_drv ? &ctx.input(6) : nullptr, c);
    std::vector<double> dscale(static_cast<size_t>(c)), dbias(static_cast<size_t>(c));
    const norm::Layout l{channels_last_, n, c, rest};
    visit_float(x.dtype(), "BatchNormalizationGrad", [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.data<T>();
      const T* pg = ctx.input(0).data<T>();
      T* pdx = ctx.output(0).data<T>();
      if (recompute) {  // ONNX's training-mode node has no saved statistics: two more passes
        // [count, per-channel sums], over the ranks when synced
        std::vector<double> sums = norm::channel_sums(px, l);
        sums.insert(sums.begin(), double(n * rest));
        reduce_statistics(node_, sums.data(), sums.size());
        for (size_t k = 0; k < size_t(c); ++k) mean[k] = sums[k + 1] / sums[0];
        std::vector<double> squares = norm::channel_centered_squares(px, l, mean);
        reduce_statistics(node_, squares.data(), squares.size());
        for (size_t k = 0; k < size_t(c); ++k) inv[k] = 1.0 / std::sqrt(squares[k] / sums[0] + eps);
      }
      std::vector<double> sum_g, sum_gxc;
      norm::channel_grad_sums(pg, px, l, mean, sum_g, sum_gxc);
      for (size_t k = 0; k < size_t(c); ++k) {
        dbias[k] = sum_g[k];
        dscale[k] = sum_gxc[k] * inv[k];
      }
      if (!training_) {
        std::vector<double> a(static_cast<size_t>(c)), zero(static_cast<size_t>(c), 0.0);
        for (size_t k = 0; k < size_t(c); ++k) a[k] = scale[k] * inv[k];
        norm::channel_affine(pg, pdx, l, a, zero);
        return;
      }
      // [count, sums of dY, sums of dY * (x - mean)] over every rank's batch when synced
      std::vector<double> stats(size_t(2 * c) + 1, 0.0);
      stats[0] = double(n * rest);
      std::copy(sum_g.begin(), sum_g.end(), stats.begin() + 1);
      std::copy(sum_gxc.begin(), sum_gxc.end(), stats.begin() + 1 + c);
      reduce_statistics(node_, stats.data(), stats.size());
      const double m = stats[0];
      // dx = a / M * (M g - dB - x^ dScale) + rm + rv (x - mean), x^ = (x - mean) inv, where rm
      // and rv carry the gradients reaching running_mean / running_var through the batch statistics.
      std::vector<double> a(static_cast<size_t>(c)), b0(static_cast<size_t>(c)), b1(static_cast<size_t>(c));
      for (size_t k = 0; k < size_t(c); ++k) {
        const double db = stats[1 + k], ds = stats[1 + size_t(c) + k] * inv[k];
        a[k] = scale[k] * inv[k];
        const double rm = has_drm ? drm[k] * (1.0 - momentum) / m : 0.0;
        const double rv = has_drv ? drv[k] * (1.0 - momentum) * 2.0 / (m - 1) : 0.0;
        b0[k] = rm - a[k] * db / m;
        b1[k] = a[k] * inv[k] * ds / m - rv;
      }
      norm::channel_grad_input(pg, px, pdx, l, mean, a, b0, b1);
    });
    write_doubles(ctx.output(1), dscale);
    write_doubles(ctx.output(2), dbias);
  }

 private:
  bool training_ = true;
  const bool channels_last_ = node_.op_type == "BatchNormalizationGradChannelsLast";
};

// ---------------------------------------------------------------------------------------------
// InstanceNormalizationGrad(dY, X, scale): statistics per (sample, channel) plane, recomputed.

class InstanceNormGradKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    return grad_outputs(ctx, "InstanceNormalizationGrad", 2);
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(1);
    const Shape d = ncr(x.shape());
    const int64_t n = d[0], c = d[1], rest = d[2];
    const double eps = node_.attr_float("epsilon", 1e-5f);
    const std::vector<double> scale = doubles(&ctx.input(2), c);
    // Per-plane partial sums, added up per channel afterwards so threads never share a slot.
    std::vector<double> plane_ds(size_t(n * c)), plane_db(size_t(n * c));
    visit_float(x.dtype(), "InstanceNormalizationGrad", [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.data<T>();
      const T* pg = ctx.input(0).data<T>();
      T* pdx = ctx.output(0).data<T>();
      parallel_for(n * c, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, rest)), [&](int64_t s, int64_t e) {
        for (int64_t p = s; p < e; ++p) {
          const int64_t base = p * rest;
          double sum = 0, sq = 0, db = 0, ds = 0;
          for (int64_t i = base; i < base + rest; ++i) sum += to_double(px[i]);
          const double mu = sum / double(rest);
          for (int64_t i = base; i < base + rest; ++i) sq += (to_double(px[i]) - mu) * (to_double(px[i]) - mu);
          const double inv = 1.0 / std::sqrt(sq / double(rest) + eps);
          for (int64_t i = base; i < base + rest; ++i) {
            db += to_double(pg[i]);
            ds += to_double(pg[i]) * (to_double(px[i]) - mu) * inv;
          }
          plane_db[size_t(p)] = db;
          plane_ds[size_t(p)] = ds;
          const double a = scale[size_t(p % c)] * inv / double(rest);
          for (int64_t i = base; i < base + rest; ++i)
            pdx[i] = from_double<T>(a * (double(rest) * to_double(pg[i]) - db - (to_double(px[i]) - mu) * inv * ds));
        }
      });
    });
    std::vector<double> dscale(size_t(c), 0.0), dbias(size_t(c), 0.0);
    for (int64_t p = 0; p < n * c; ++p) {
      dscale[size_t(p % c)] += plane_ds[size_t(p)];
      dbias[size_t(p % c)] += plane_db[size_t(p)];
    }
    write_doubles(ctx.output(1), dscale);
    write_doubles(ctx.output(2), dbias);
  }
};

const std::vector<DType> kFloats = {DType::Float32, DType::Float64, DType::Float16};

const KernelRegistrar bn_grad({kKilnDomain, "BatchNormalizationGrad", 1, kMaxOpset, kFloats},
                              [](const Node& n) { return std::make_unique<BatchNormGradKernel>(n); });
const KernelRegistrar bn_grad_cl({kKilnDomain, "BatchNormalizationGradChannelsLast", 1, kMaxOpset, kFloats},
                                 [](const Node& n) { return std::make_unique<BatchNormGradKernel>(n); });
const KernelRegistrar in_grad({kKilnDomain, "InstanceNormalizationGrad", 1, kMaxOpset, kFloats},
                              [](const Node& n) { return std::make_unique<InstanceNormGradKernel>(n); });

const OpDocRegistrar bn_doc(
    {kKilnDomain,
     "BatchNormalizationGrad",
     "Gradient of BatchNormalization (X viewed as [N, C, rest]) in training or inference mode.",
     {"dY: gradient of Y", "X: the forward input", "scale: [C]",
      "mean (optional in training mode): [C], the statistics Y was normalised with; recomputed from X if absent",
      "inv_std (optional in training mode): [C], 1 / sqrt(var + epsilon) of those statistics",
      "dRunningMean (optional): gradient of the running_mean output (training mode)",
      "dRunningVar (optional): gradient of the running_var output (training mode)"},
     {"dX: gradient of X", "dScale: [C], gradient of scale", "dB: [C], gradient of B"},
     "attributes epsilon, momentum (ONNX's: weight of the old running value), training_mode (default 1). "
     "x^ = (x - mean) * inv_std; dB = sum dY; dScale = sum dY * x^ (sums over N and rest). Inference: "
     "dX = dY * scale * inv_std. Training (M = N * rest): dX = scale * inv_std / M * (M * dY - dB - x^ * dScale) "
     "+ dRunningMean * (1 - momentum) / M + dRunningVar * (1 - momentum) * 2 * (x - mean) / (M - 1)"});
const OpDocRegistrar bn_cl_doc(
    {kKilnDomain,
     "BatchNormalizationGradChannelsLast",
     "BatchNormalizationGrad over 2-D maps held channels last (the layout pass, ir/fusion.h).",
     {"dY: [N, H, W, C]", "X: [N, H, W, C]", "scale: [C]", "mean (optional)", "inv_std (optional)",
      "dRunningMean (optional)", "dRunningVar (optional)"},
     {"dX: [N, H, W, C]", "dScale: [C]", "dB: [C]"},
     "BatchNormalizationGrad's inputs, attributes and formulas with the channels on the last axis."});
const OpDocRegistrar in_doc(
    {kKilnDomain,
     "InstanceNormalizationGrad",
     "Gradient of InstanceNormalization.",
     {"dY: gradient of Y", "X: the forward input [N, C, ...]", "scale: [C]"},
     {"dX: gradient of X", "dScale: [C], gradient of scale", "dB: [C], gradient of B"},
     "attribute epsilon. Per (n, c) plane of R elements: x^ = (x - mean) / sqrt(var + epsilon); "
     "dX = scale * inv_std / R * (R * dY - sum dY - x^ * sum(dY * x^)); dScale = sum over n and the plane of "
     "dY * x^; dB = sum dY"});

}  // namespace
}  // namespace kiln

// BatchNormalization. Inference mode (running statistics): Y = scale * (X - mean) / sqrt(var +
// epsilon) + B per channel, as one multiply-add per element (see BatchNormPlain for why not oneDNN).
// Opsets 14 and 15 let the statistics (and from 15 also scale and B) have their own float dtype.
//
// Training mode (opset 14+, training_mode=1; outputs Y, running_mean, running_var): Y is normalised
// by the batch statistics of each channel (over N and the spatial dims; biased variance, as both
// ONNX and PyTorch normalise), and
//   running_mean = input_mean * momentum + batch_mean * (1 - momentum)
//   running_var  = input_var  * momentum + batch_var_unbiased * (1 - momentum)
// ONNX's momentum is the weight of the OLD value (default 0.9); PyTorch's momentum is the weight of
// the NEW one (default 0.1), and its exporter writes 1 - momentum. running_var follows PyTorch, not
// ONNX's text: PyTorch updates it with the UNBIASED batch variance (sum / (M - 1), M = N * spatial)
// while ONNX's spec and reference use the population variance (sum / M). Kiln trains models that
// PyTorch exported, whose running statistics must evolve as PyTorch's do; ONNX's two
// *_training_mode conformance cases therefore differ in running_var by the factor M / (M - 1).
//
// InstanceNormalization: the same formula with each (sample, channel)'s own mean and variance.
#include <fmt/format.h>

#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/norm_layout.h"
#include "kernels/cpu/statistics_reduce.h"
#include "kiln/kernel.h"

namespace kiln {

// Training mode: the batch's mean and (biased) variance per channel, two passes over X, then the
// affine pass, in either layout (norm_layout.h). With synchronized statistics (statistics_reduce.h)
// the sums, and the element count, are those of every rank's batch.
void norm::batch_norm_training(const Node& node, ComputeContext& ctx, const Layout& l) {
  const int64_t c = l.c;
  const double eps = node.attr_float("epsilon", 1e-5f), momentum = node.attr_float("momentum", 0.9f);
  std::vector<double> mean(size_t(c), 0.0), var(size_t(c), 0.0);
  double m = 0;
  Tensor& y = ctx.output(0);
  visit_dtype(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half>) {
      const T* px = ctx.input(0).data<T>();
      T* py = y.data<T>();
      // [count, sum per channel], then the sums of squares, over the ranks when synced.
      std::vector<double> sums = norm::channel_sums(px, l);
      sums.insert(sums.begin(), double(l.rows()));
      reduce_statistics(node, sums.data(), sums.size());
      m = sums[0];
      if (m <= 1)
        throw ShapeError(
            fmt::format("BatchNormalization: training mode needs more than one value per channel to "
                        "compute batch statistics, X is {}",
                        ctx.input(0).describe()));
      for (int64_t ch = 0; ch < c; ++ch) mean[size_t(ch)] = sums[size_t(ch) + 1] / m;
      std::vector<double> squares = norm::channel_centered_squares(px, l, mean);
      reduce_statistics(node, squares.data(), squares.size());
      std::vector<double> a(static_cast<size_t>(c)), b(static_cast<size_t>(c));
      for (int64_t ch = 0; ch < c; ++ch) {
        const size_t k = size_t(ch);
        var[k] = squares[k] / m;
        a[k] = ctx.input(1).item_as_double(ch) / std::sqrt(var[k] + eps);
        b[k] = ctx.input(2).item_as_double(ch) - mean[k] * a[k];
      }
      norm::channel_affine(px, py, l, a, b);
    } else {
      throw Unsupported(fmt::format("BatchNormalization: {} input", dtype_name(y.dtype())));
    }
  });
  auto update = [&](size_t out, size_t in, const std::vector<double>& batch, double correction) {
    if (out >= ctx.outputs.size() || !ctx.outputs[out] || !ctx.outputs[out]->defined()) return;
    Tensor& r = ctx.output(out);
    visit_dtype(r.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half>) {
        for (int64_t ch = 0; ch < c; ++ch)
          r.data<T>()[ch] = from_double<T>(ctx.input(in).item_as_double(ch) * momentum +
                                           batch[size_t(ch)] * correction * (1.0 - momentum));
      } else {
        throw TypeError(fmt::format("BatchNormalization: running statistic {} must be a float", r.describe()));
      }
    });
  };
  update(1, 3, mean, 1.0);
  update(2, 4, var, m / (m - 1));
}

namespace {

bool training_mode(const Node& node) { return node.attr_int("training_mode", 0) != 0; }

// Validates X and its per-channel parameters for the node's opset; returns X as [N, C, rest].
Shape batch_norm_shape(const Node& node, const InferContext& ctx) {
  const bool training = training_mode(node);
  if (training && ctx.opset < 14)
    throw InvalidModel(
        fmt::format("BatchNormalization: training_mode exists from opset 14 (model opset {})", ctx.opset));
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (!node.outputs[i].empty() && (!training || i > 2))
      throw Unsupported(
          fmt::format("BatchNormalization: output {} ('{}') exists only in training mode ({}); "
                      "set training_mode=1 (opset 14+) or export in inference (eval) mode",
                      i, node.outputs[i],
                      ctx.opset < 14 ? "the opset < 14 five-output form is not supported" : "training_mode=0 here"));
  if (node.attr_int("spatial", 1) != 1)
    throw Unsupported("BatchNormalization: spatial=0 (per-activation statistics) is not supported");
  const TensorMeta& x = ctx.input(0);
  if (x.shape.size() < 2)
    throw ShapeError(fmt::format("BatchNormalization: input X {} must be [N, C, ...]", x.describe()));
  static const char* names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (size_t i = 1; i < 5; ++i) {
    const TensorMeta& p = ctx.input(i);
    // Opset 14 types the statistics separately (U), opset 15 also scale and B (T1); all floats.
    const bool own_type = (ctx.opset >= 14 && i >= 3) || ctx.opset >= 15;
    if (own_type ? !is_floating(p.dtype) : p.dtype != x.dtype)
      throw TypeError(fmt::format("BatchNormalization: {} {} must {} (opset {})", names[i], p.describe(),
                                  own_type ? "be a float type" : fmt::format("have the dtype of X {}", x.describe()),
                                  ctx.opset));
    if (p.shape != Shape{x.shape[1]})
      throw ShapeError(fmt::format("BatchNormalization: {} {} must be [{}], one value per channel of X {}", names[i],
                                   p.describe(), x.shape[1], x.describe()));
  }
  // Statistics are per channel whatever the spatial rank.
  int64_t rest = 1;
  for (size_t i = 2; i < x.shape.size(); ++i) rest *= x.shape[i];
  return {x.shape[0], x.shape[1], rest};
}

// Y, plus running_mean and running_var (typed like input_mean and input_var) when the node has them.
std::vector<TensorMeta> batch_norm_outputs(const Node& node, const InferContext& ctx) {
  const TensorMeta& x = ctx.input(0);
  std::vector<TensorMeta> out{TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  for (size_t i = 1; i < node.outputs.size() && i < 3; ++i)
    out.push_back(TensorMeta{ctx.dtype(i + 2), ctx.shape(i + 2), false, Tensor()});
  return out;
}

// Inference: y = x * a + b per channel with a = scale / sqrt(var + eps), b = B - mean * a (a and b
// in double; float32 then runs a float multiply-add, float64 and float16 compute in double). Not
// oneDNN: its 2.6 batch_normalization_forward on plain NCHW is a reference loop, measured 60-100x
// slower ([64, 32, 28, 28] on 2 threads: 12.3 ms against ~0.15 ms).
class BatchNormPlain final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    data_ = batch_norm_shape(node_, ctx);
    return batch_norm_outputs(node_, ctx);
  }
  void compute(ComputeContext& ctx) override {
    if (training_mode(node_))
      return norm::batch_norm_training(node_, ctx, norm::Layout{false, data_[0], data_[1], data_[2]});
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
      if constexpr (std::is_same_v<T, float>) {
        const std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
        const float* px = ctx.input(0).data<float>();
        float* py = y.data<float>();
        parallel_for(data_[0] * c, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, rest)), [&](int64_t s, int64_t e) {
          for (int64_t plane = s; plane < e; ++plane) {
            const float ac = af[size_t(plane % c)], bc = bf[size_t(plane % c)];
            const float* xp = px + plane * rest;
            float* yp = py + plane * rest;
            for (int64_t i = 0; i < rest; ++i) yp[i] = xp[i] * ac + bc;
          }
        });
      } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, Half>) {
        const T* px = ctx.input(0).data<T>();
        T* py = y.data<T>();
        parallel_for(data_[0] * c, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, rest)), [&](int64_t s, int64_t e) {
          for (int64_t plane = s; plane < e; ++plane) {
            const double ac = a[size_t(plane % c)], bc = b[size_t(plane % c)];
            for (int64_t i = plane * rest; i < (plane + 1) * rest; ++i)
              py[i] = from_double<T>(to_double(px[i]) * ac + bc);
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
      throw ShapeError(
          fmt::format("InstanceNormalization: input {} must be [N, C, D1, ...] (rank >= 3)", x.describe()));
    static const char* names[] = {"input", "scale", "B"};
    for (size_t i = 1; i < 3; ++i) {
      const TensorMeta& p = ctx.input(i);
      if (p.dtype != x.dtype || p.shape != Shape{x.shape[1]})
        throw ShapeError(fmt::format("InstanceNormalization: {} {} must be {}[{}], one value per channel of input {}",
                                     names[i], p.describe(), dtype_name(x.dtype), x.shape[1], x.describe()));
    }
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    Tensor& y = ctx.output(0);
    visit_dtype(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half>)
        run<T>(ctx.input(0), ctx.input(1), ctx.input(2), y);
      else throw Unsupported(fmt::format("InstanceNormalization: {} input", dtype_name(y.dtype())));
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

const KernelRegistrar batch_norm_plain(
    {"", "BatchNormalization", 7, kMaxOpset, {DType::Float32, DType::Float64, DType::Float16}},
    [](const Node& n) { return std::make_unique<BatchNormPlain>(n); });
const KernelRegistrar instance_norm(
    {"", "InstanceNormalization", 6, kMaxOpset, {DType::Float32, DType::Float64, DType::Float16}},
    [](const Node& n) { return std::make_unique<InstanceNormKernel>(n); });

}  // namespace
}  // namespace kiln

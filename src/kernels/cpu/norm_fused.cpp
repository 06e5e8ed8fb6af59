// ai.kiln.BatchNormalizationChannelsLast: BatchNormalization over 2-D maps held channels last
// ([N, H, W, C]), the layout pass's normalisation (ir/fusion.h, to_channels_last). Inference mode:
// per channel, y = x * a + b with a = scale / sqrt(var + epsilon) and b = B - mean * a, worked out
// in double once per call (the statistics are inputs: an eval model's parameters), then one pass
// over the rows. Training mode (training_mode 1): BatchNormalization's (norm.cpp) over the rows,
// with its running_mean and running_var outputs. Float32.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/norm_layout.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

class BatchNormChannelsLast final : public Kernel {
 public:
  using Kernel::Kernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    if (x.shape.size() != 4)
      throw ShapeError(fmt::format("{}: input X {} must have rank 4 ([N, H, W, C])", node_.label(), x.describe()));
    if (x.dtype != DType::Float32)
      throw TypeError(fmt::format("{}: input X {} must be float32", node_.label(), x.describe()));
    static const char* names[] = {"X", "scale", "B", "input_mean", "input_var"};
    for (size_t i = 1; i < 5; ++i) {
      const TensorMeta& p = ctx.input(i);
      if (p.dtype != DType::Float32 || p.shape != Shape{x.shape[3]})
        throw ShapeError(fmt::format("{}: {} {} must be float[{}], one value per channel of X {}", node_.label(),
                                     names[i], p.describe(), x.shape[3], x.describe()));
    }
    std::vector<TensorMeta> out{TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
    for (size_t i = 1; i < node_.outputs.size(); ++i) {
      if (i > 2 || (!training() && !node_.outputs[i].empty()))
        throw InvalidModel(fmt::format("{}: output {} ('{}') exists only in training mode (training_mode 1)",
                                       node_.label(), i, node_.outputs[i]));
      out.push_back(TensorMeta{DType::Float32, Shape{x.shape[3]}, false, Tensor()});
    }
    return out;
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (training()) {
      const Shape& s = x.shape();
      return norm::batch_norm_training(node_, ctx, norm::Layout{true, s[0], s[3], s[1] * s[2]});
    }
    Tensor& y = ctx.output(0);
    const int64_t c = x.shape()[3], rows = c == 0 ? 0 : x.numel() / c;
    const double eps = node_.attr_float("epsilon", 1e-5f);
    const float* scale = ctx.input(1).data<float>();
    const float* shift = ctx.input(2).data<float>();
    const float* mean = ctx.input(3).data<float>();
    const float* var = ctx.input(4).data<float>();
    std::vector<float> a(static_cast<size_t>(c)), b(static_cast<size_t>(c));
    for (int64_t k = 0; k < c; ++k) {
      const double ak = double(scale[k]) / std::sqrt(double(var[k]) + eps);
      a[size_t(k)] = static_cast<float>(ak);
      b[size_t(k)] = static_cast<float>(double(shift[k]) - double(mean[k]) * ak);
    }
    const float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    const float* px = x.data<float>();
    float* py = y.data<float>();
    parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, c)), [=](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* __restrict xr = px + r * c;
        float* __restrict yr = py + r * c;
#pragma omp simd
        for (int64_t k = 0; k < c; ++k) yr[k] = xr[k] * pa[k] + pb[k];
      }
    });
  }

  std::optional<size_t> inplace_input() const override { return training() ? std::nullopt : std::optional<size_t>(0); }

 private:
  bool training() const { return node_.attr_int("training_mode", 0) != 0; }
};

const KernelRegistrar batch_norm_cl({kKilnDomain, "BatchNormalizationChannelsLast", 1, kMaxOpset, {DType::Float32}},
                                    [](const Node& n) { return std::make_unique<BatchNormChannelsLast>(n); });
const OpDocRegistrar batch_norm_cl_doc(
    {kKilnDomain,
     "BatchNormalizationChannelsLast",
     "BatchNormalization over 2-D maps held channels last (the layout pass, ir/fusion.h).",
     {"X: [N, H, W, C]", "scale: [C]", "B: [C]", "input_mean: [C]", "input_var: [C]"},
     {"Y: [N, H, W, C]", "running_mean (optional, training mode): [C]", "running_var (optional, training mode): [C]"},
     "attributes epsilon, momentum, training_mode (default 0). Inference: per channel, a = scale / sqrt(input_var "
     "+ epsilon), Y = X * a + (B - input_mean * a). Training: BatchNormalization's training mode with the "
     "statistics over N, H and W. Float32."});

}  // namespace
}  // namespace kiln

// ai.kiln.BatchNormalizationChannelsLast: BatchNormalization in inference mode over 2-D maps held
// channels last ([N, H, W, C]), the layout pass's normalisation (ir/fusion.h, to_channels_last):
// per channel, y = x * a + b with a = scale / sqrt(var + epsilon) and b = B - mean * a, worked out
// in double once per call (the statistics are inputs: an eval model's parameters), then one pass
// over the rows. Float32.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "core/parallel.h"
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
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
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

  std::optional<size_t> inplace_input() const override { return 0; }
};

const KernelRegistrar batch_norm_cl({kKilnDomain, "BatchNormalizationChannelsLast", 1, kMaxOpset, {DType::Float32}},
                                    [](const Node& n) { return std::make_unique<BatchNormChannelsLast>(n); });
const OpDocRegistrar batch_norm_cl_doc(
    {kKilnDomain,
     "BatchNormalizationChannelsLast",
     "BatchNormalization in inference mode over 2-D maps held channels last (the layout pass, ir/fusion.h).",
     {"X: [N, H, W, C]", "scale: [C]", "B: [C]", "input_mean: [C]", "input_var: [C]"},
     {"Y: [N, H, W, C]"},
     "attribute epsilon. Per channel, a = scale / sqrt(input_var + epsilon), Y = X * a + (B - input_mean * a). "
     "Float32."});

}  // namespace
}  // namespace kiln

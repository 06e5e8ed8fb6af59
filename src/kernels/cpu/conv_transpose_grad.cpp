// ai.kiln.ConvTransposeGrad: the gradients of ConvTranspose (conv_transpose.cpp) with respect to its
// input, weight and bias, through the Conv it is the adjoint of (oneDNN for float32, the direct
// loops of conv_common.h otherwise).
#include <fmt/format.h>

#include <cstring>

#include "kernels/cpu/conv_transpose_common.h"
#include "kernels/cpu/low_precision.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using deconv::as_conv;
using deconv::deconv_shape;
using deconv::DeconvShape;

class ConvTransposeGradKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    InferContext fwd{ctx.node, ctx.opset, {ctx.inputs.begin() + 1, ctx.inputs.end()}};
    s_ = deconv_shape(node_, fwd);
    const TensorMeta& dy = ctx.input(0);
    if (dy.dtype != ctx.dtype(1) || dy.shape != s_.y)
      throw ShapeError(fmt::format("ConvTransposeGrad: dY {} must be {}{}, the output of ConvTranspose(X {}, W {})",
                                   dy.describe(), dtype_name(ctx.dtype(1)), to_string(s_.y), ctx.input(1).describe(),
                                   ctx.input(2).describe()));
    mask_ = conv::output_mask(node_);
    dtype_ = dy.dtype;
    built_ = false;
    // Outputs not asked for are empty, so the planner reserves nothing for them.
    const auto meta = [&](size_t i, const Shape& sh) {
      return TensorMeta{dtype_, mask_[i] ? sh : Shape{0}, dy.dynamic, Tensor()};
    };
    return {meta(0, s_.x), meta(1, s_.w), meta(2, {s_.y[1]})};
  }
  void prepare(const InferContext&, const std::vector<TensorMeta>&) override { build(); }

  void compute(ComputeContext& ctx) override {
    if (!built_) build();
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& w = ctx.input(2);
    const conv::Problem p = as_conv(s_);
    if (numel(s_.x) == 0 || numel(s_.y) == 0) {
      for (size_t i = 0; i < 3; ++i)
        if (mask_[i]) std::memset(ctx.output(i).raw_data(), 0, ctx.output(i).nbytes());
      return;
    }
    visit_dtype(dtype_, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        if (mask_[0]) {
          if (use_dnnl_) dnnl_.forward(dy, w, ctx.output(0));
          else conv::forward_direct<T>(p, dy.data<T>(), w.data<T>(), nullptr, ctx.output(0).data<T>());
        }
        if (mask_[1]) {
          if (use_dnnl_) dnnl_.weights(dy, x, ctx.output(1), nullptr);
          else conv::backward_weights_direct<T>(p, dy.data<T>(), x.data<T>(), ctx.output(1).data<T>());
        }
        if (mask_[2]) conv::channel_sum<T>(s_.y, dy.data<T>(), ctx.output(2).data<T>());
      } else {
        throw Unsupported(
            fmt::format("ConvTransposeGrad: {} inputs (float32 and float64 are supported)", dtype_name(dtype_)));
      }
    });
  }

 private:
  void build() {
    built_ = true;
    bool fits = true;  // oneDNN wants non-negative pads; an output past the full line has pad_end < 0
    for (int64_t pe : s_.pad_end) fits = fits && pe >= 0;
    use_dnnl_ = dtype_ == DType::Float32 && fits && numel(s_.x) > 0 && numel(s_.y) > 0 &&
                dnnl_.build(as_conv(s_), mask_[0], false, mask_[1], false);
  }

  DeconvShape s_;
  std::array<bool, 3> mask_{};
  DType dtype_ = DType::Float32;
  bool built_ = false, use_dnnl_ = false;
  conv::DnnlConv dnnl_;
};

const KernelRegistrar conv_transpose_grad(
    {kKilnDomain, "ConvTransposeGrad", 1, kMaxOpset, {DType::Float32, DType::Float64}},
    [](const Node& n) { return std::make_unique<ConvTransposeGradKernel>(n); });
const KernelRegistrar conv_transpose_grad_low(
    {kKilnDomain, "ConvTransposeGrad", 1, kMaxOpset, {DType::BFloat16, DType::Float16}},
    via_float32([](const Node& n) { return std::make_unique<ConvTransposeGradKernel>(n); }));
const OpDocRegistrar conv_transpose_grad_doc(
    {kKilnDomain,
     "ConvTransposeGrad",
     "Gradients of ConvTranspose with respect to its input, weight and bias. Attributes: those of the "
     "ConvTranspose (group, strides, dilations, pads, auto_pad, output_padding, output_shape, kernel_shape) "
     "and output_mask (3 ints, default [1, 1, 1]); an output masked off or left unnamed is not computed and "
     "has shape [0].",
     {"dY: gradient of the ConvTranspose output Y, [N, M, out...]", "X: the ConvTranspose input, [N, C, in...]",
      "W: the ConvTranspose weight, [C, M/group, k...]"},
     {"dX: gradient of X, X's shape", "dW: gradient of W, W's shape", "dB: gradient of the bias, [M]"},
     "with Y[n, m, i*s - p + k*d] += X[n, c, i] W[c, m, k] (+ B[m]): dX[n, c, i] = sum_{m, k} dY[n, m, i*s - p + k*d] "
     "W[c, m, k] (a Conv of dY by W); dW[c, m, k] = sum_{n, i} X[n, c, i] dY[n, m, i*s - p + k*d]; "
     "dB[m] = sum_{n, o} dY[n, m, o] (positions outside Y contribute nothing)"});

}  // namespace
}  // namespace kiln

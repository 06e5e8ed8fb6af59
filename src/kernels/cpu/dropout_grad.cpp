// ai.kiln.DropoutGrad(dY, mask, ratio, training_mode) -> dX, the gradient of Dropout (dropout.cpp).
// It reuses the forward's mask, so the gradient sees exactly the elements the forward kept (see
// autodiff/dropout.cpp).
#include <fmt/format.h>

#include <cstring>

#include "kernels/cpu/dropout_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using dropout::check_mode_inputs;
using dropout::drop_ratio;
using dropout::visit_float;

// dX = dY * mask / (1 - ratio) in training mode, dY otherwise (the forward was the identity).
class DropoutGradKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& dy = ctx.input(0);
    if (ctx.dtype(1) != DType::Bool || ctx.shape(1) != dy.shape)
      throw ShapeError(fmt::format("DropoutGrad: mask {}{} must be bool with the shape of dY {}{}",
                                   dtype_name(ctx.dtype(1)), to_string(ctx.shape(1)), dtype_name(dy.dtype),
                                   to_string(dy.shape)));
    check_mode_inputs(ctx, 2);
    return {{dy.dtype, dy.shape, dy.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const double ratio =
        drop_ratio(ctx.has_input(2) ? &ctx.input(2) : nullptr, ctx.has_input(3) ? &ctx.input(3) : nullptr);
    const Tensor& dy = ctx.input(0);
    Tensor& dx = ctx.output(0);
    if (ratio == 0.0) {
      if (dx.raw_data() != dy.raw_data() && dy.nbytes() > 0) std::memcpy(dx.raw_data(), dy.raw_data(), dy.nbytes());
      return;
    }
    const double scale = 1.0 / (1.0 - ratio);
    const bool* m = ctx.input(1).data<bool>();
    visit_float(dy.dtype(), "DropoutGrad", [&](auto tag) {
      using T = decltype(tag);
      const T* g = dy.data<T>();
      T* out = dx.data<T>();
      for (int64_t i = 0; i < dy.numel(); ++i)
        out[i] = m[i] ? from_double<T>(to_double(g[i]) * scale) : from_double<T>(0.0);
    });
  }
  std::optional<size_t> inplace_input() const override { return 0; }
};

const KernelRegistrar reg_grad(
    {kKilnDomain, "DropoutGrad", 1, kMaxOpset, {DType::Float32, DType::Float64, DType::Float16}},
    [](const Node& n) { return std::make_unique<DropoutGradKernel>(n); });
const OpDocRegistrar doc({kKilnDomain,
                          "DropoutGrad",
                          "Gradient of Dropout through the mask the forward drew.",
                          {"dY: gradient of Dropout's output", "mask: bool, Dropout's mask output (true = kept)",
                           "ratio (optional): Dropout's ratio input, default 0.5",
                           "training_mode (optional): Dropout's training_mode input, default false"},
                          {"dX: gradient of Dropout's input, with dY's shape and dtype"},
                          "dX = training_mode && ratio > 0 ? dY * mask / (1 - ratio) : dY"});

}  // namespace
}  // namespace kiln

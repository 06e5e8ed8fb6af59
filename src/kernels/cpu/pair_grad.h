// The shape of Kiln's one-pass gradient kernels of a single-input op (ReluGrad, GeluGrad,
// SoftmaxGrad): inputs dY and the forward value the rule pairs it with (the op's input or output),
// of one shape and one float dtype; dX has that shape and may take over dY's buffer. Derived
// supplies `template <class T> void run(ComputeContext&)` for float and double.
#pragma once

#include <fmt/format.h>

#include "kiln/kernel.h"

namespace kiln {

template <class Derived>
class PairGradKernel : public Kernel {
 public:
  using Kernel::Kernel;

  void compute(ComputeContext& ctx) override {
    if (ctx.input(0).dtype() == DType::Float32) return static_cast<Derived*>(this)->template run<float>(ctx);
    static_cast<Derived*>(this)->template run<double>(ctx);
  }

  std::optional<size_t> inplace_input() const override { return 0; }

 protected:
  // dY and the paired value (named `second` in the message) agree in dtype and shape.
  void check_pair(const InferContext& ctx, const char* second) const {
    if (ctx.shape(0) != ctx.shape(1) || ctx.dtype(0) != ctx.dtype(1))
      throw ShapeError(fmt::format("{}: dY {}{} and {} {}{} must have the same dtype and shape", node_.op_type,
                                   dtype_name(ctx.dtype(0)), to_string(ctx.shape(0)), second, dtype_name(ctx.dtype(1)),
                                   to_string(ctx.shape(1))));
  }
};

}  // namespace kiln

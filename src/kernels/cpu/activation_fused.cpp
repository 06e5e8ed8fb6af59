// Activations that Kiln's fusion passes (ir/fusion.h) write in place of the chains of standard ops
// that exporters emit for them: ai.kiln.Gelu, the one-node Gelu of models whose opset predates
// ONNX's own (opset 20). Its kernel is Gelu's (gelu_common.h).
#include "kernels/cpu/gelu_common.h"
#include "kernels/cpu/low_precision.h"

namespace kiln {
namespace {

// With out_dtype: Gelu of a float32 X rounded to bfloat16 or float16 as it is written, what a Gelu
// then a Cast give, without the float32 result in memory.
class GeluRounded final : public Kernel {
 public:
  explicit GeluRounded(const Node& n) : Kernel(n), tanh_(gelu::tanh_form(n)), out_(*rounded_out_dtype(n)) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (ctx.dtype(0) != DType::Float32)
      throw TypeError(fmt::format("Gelu with out_dtype: X must be float32, got {}{}", dtype_name(ctx.dtype(0)),
                                  to_string(ctx.shape(0))));
    return {{out_, ctx.shape(0), ctx.input(0).dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const float* x = ctx.input(0).data<float>();
    Tensor& y = ctx.output(0);
    if (out_ == DType::BFloat16) vmath::gelu(x, y.data<BFloat16>(), y.numel(), tanh_);
    else vmath::gelu(x, y.data<Half>(), y.numel(), tanh_);
  }

 private:
  bool tanh_;
  DType out_;
};

const KernelRegistrar reg_gelu({kKilnDomain, "Gelu", 1, kMaxOpset, gelu::GeluOp::Types::dtypes(), 0, {}},
                               [](const Node& n) -> std::unique_ptr<Kernel> {
                                 if (rounded_out_dtype(n)) return std::make_unique<GeluRounded>(n);
                                 return std::make_unique<UnaryKernel<gelu::GeluOp>>(n);
                               });
const OpDocRegistrar doc_gelu(
    {kKilnDomain,
     "Gelu",
     "ONNX's Gelu (opset 20) for earlier opsets: what the Gelu fusion writes for the standard-op chain "
     "x/2 (1 + erf(x/sqrt 2)) or its tanh approximation.",
     {"X: a float tensor (float32 with out_dtype)"},
     {"Y: X's shape and dtype, or out_dtype's"},
     "approximate \"none\": Y = X/2 (1 + erf(X/sqrt 2)); \"tanh\": Y = X/2 (1 + tanh(sqrt(2/pi) (X + 0.044715 X^3))); "
     "out_dtype (optional, bfloat16 or float16): Y rounded to it (mixed precision's Gelu before a 16-bit product)"});

}  // namespace
}  // namespace kiln

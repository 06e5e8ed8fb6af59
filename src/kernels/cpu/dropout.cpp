// Dropout for inference: the output is the input and the optional mask is all true (all kept).
// Training mode draws a random mask from seeded generators, which arrives with training; until
// then training_mode=true is refused unless ratio is 0, where the spec's result is the identity.
#include <fmt/format.h>

#include <cstring>

#include "kiln/kernel.h"

namespace kiln {
namespace {

class DropoutKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& in = ctx.input(0);
    if (ctx.opset >= 12) {
      if (ctx.has_input(1) && (!is_floating(ctx.dtype(1)) || numel(ctx.shape(1)) != 1))
        throw TypeError(fmt::format("ratio must be a floating-point scalar, got {}{}", dtype_name(ctx.dtype(1)),
                                    to_string(ctx.shape(1))));
      if (ctx.has_input(2) && (ctx.dtype(2) != DType::Bool || numel(ctx.shape(2)) != 1))
        throw TypeError(fmt::format("training_mode must be a bool scalar, got {}{}", dtype_name(ctx.dtype(2)),
                                    to_string(ctx.shape(2))));
      // Checked now when the inputs are constants; again in compute(), on the fed values.
      if ((!ctx.has_input(1) || ctx.has_value(1)) && (!ctx.has_input(2) || ctx.has_value(2)))
        check_mode(ctx.has_input(1) ? &ctx.input(1).value : nullptr, ctx.has_input(2) ? &ctx.input(2).value : nullptr);
    } else {
      check_ratio(node_.attr_float("ratio", 0.5f));
    }
    std::vector<TensorMeta> out{{in.dtype, in.shape, in.dynamic, Tensor()}};
    // Before opset 10 the mask had the input's type; from 10 it is bool.
    if (node_.outputs.size() > 1)
      out.push_back({ctx.opset >= 10 ? DType::Bool : in.dtype, in.shape, in.dynamic, Tensor()});
    return out;
  }

  void compute(ComputeContext& ctx) override {
    if (ctx.has_input(1) || ctx.has_input(2))
      check_mode(ctx.has_input(1) ? &ctx.input(1) : nullptr, ctx.has_input(2) ? &ctx.input(2) : nullptr);
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    if (out.raw_data() != in.raw_data() && in.nbytes() > 0) std::memcpy(out.raw_data(), in.raw_data(), in.nbytes());
    if (ctx.outputs.size() > 1 && ctx.outputs[1] && ctx.outputs[1]->defined()) {
      Tensor& mask = ctx.output(1);
      visit_dtype(mask.dtype(), [&](auto tag) {
        using T = decltype(tag);
        T* p = mask.data<T>();
        const T one = from_double<T>(1.0);
        for (int64_t i = 0; i < mask.numel(); ++i) p[i] = one;
      });
    }
  }

  std::optional<size_t> inplace_input() const override { return 0; }

 private:
  static void check_ratio(double ratio) {
    if (!(ratio >= 0.0 && ratio < 1.0)) throw InvalidModel(fmt::format("ratio must be in [0, 1), got {}", ratio));
  }
  // Opset 12 on: ratio (default 0.5) and training_mode (default false) are optional inputs.
  static void check_mode(const Tensor* ratio, const Tensor* training_mode) {
    const double r = ratio ? ratio->contiguous().item_as_double(0) : 0.5;
    check_ratio(r);
    if (training_mode && training_mode->contiguous().item_as_double(0) != 0.0 && r != 0.0)
      throw Unsupported(
          fmt::format("Dropout in training mode arrives with training (training_mode=true, ratio={})", r));
  }
};

const KernelRegistrar reg_dropout({"", "Dropout", 7, kMaxOpset, {}},
                                  [](const Node& n) { return std::make_unique<DropoutKernel>(n); });

}  // namespace
}  // namespace kiln

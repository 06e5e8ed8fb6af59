// BatchNormalization in inference mode (running statistics): Y = scale * (X - mean) /
// sqrt(var + epsilon) + B per channel, on oneDNN's batch_normalization_forward with global stats.
#include <fmt/format.h>

#include "kernels/cpu/dnnl_common.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

std::string describe(const TensorMeta& m) { return fmt::format("{}{}", dtype_name(m.dtype), to_string(m.shape)); }

class BatchNormF32 final : public Kernel {
 public:
  using Kernel::Kernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (node_.attr_int("training_mode", 0) != 0)
      throw Unsupported("BatchNormalization: training_mode=1 (normalising by batch statistics and updating the "
                        "running ones) is not supported yet; export the model in inference (eval) mode");
    for (size_t i = 1; i < node_.outputs.size(); ++i)
      if (!node_.outputs[i].empty())
        throw Unsupported(fmt::format("BatchNormalization: output {} ('{}') exists only in training mode, which is "
                                      "not supported yet; export the model in inference (eval) mode",
                                      i, node_.outputs[i]));
    if (node_.attr_int("spatial", 1) != 1)
      throw Unsupported("BatchNormalization: spatial=0 (per-activation statistics) is not supported");
    const TensorMeta& x = ctx.input(0);
    if (x.shape.size() < 2)
      throw ShapeError(fmt::format("BatchNormalization: input X {} must be [N, C, ...]", describe(x)));
    static const char* names[] = {"X", "scale", "B", "input_mean", "input_var"};
    for (size_t i = 1; i < 5; ++i) {
      const TensorMeta& p = ctx.input(i);
      if (p.dtype != x.dtype)
        throw TypeError(fmt::format("BatchNormalization: {} {} must have the dtype of X {}", names[i], describe(p),
                                    describe(x)));
      if (p.shape != Shape{x.shape[1]})
        throw ShapeError(fmt::format("BatchNormalization: {} {} must be [{}], one value per channel of X {}",
                                     names[i], describe(p), x.shape[1], describe(x)));
    }
    // oneDNN sees [N, C, rest flattened]: statistics are per channel whatever the spatial rank.
    int64_t rest = 1;
    for (size_t i = 2; i < x.shape.size(); ++i) rest *= x.shape[i];
    data_ = {x.shape[0], x.shape[1], rest};
    built_ = false;
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
                        {DNNL_ARG_SCALE, dnnl_util::memory_of(channel, ctx.input(1))},
                        {DNNL_ARG_SHIFT, dnnl_util::memory_of(channel, ctx.input(2))},
                        {DNNL_ARG_MEAN, dnnl_util::memory_of(channel, ctx.input(3))},
                        {DNNL_ARG_VARIANCE, dnnl_util::memory_of(channel, ctx.input(4))},
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

const KernelRegistrar batch_norm_f32({"", "BatchNormalization", 7, kMaxOpset, {DType::Float32}},
                                     [](const Node& n) { return std::make_unique<BatchNormF32>(n); });

}  // namespace
}  // namespace kiln

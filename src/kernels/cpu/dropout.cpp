// Dropout. Inference (the default, and every opset before 12): the output is the input and the
// optional mask is all true. Training (opset 12+, training_mode=true, ratio > 0): each element is
// kept with probability 1 - ratio, Y = X * mask / (1 - ratio), and the mask output says which were
// kept. The kernel's seed comes from the node's `seed` attribute if it has one, else from
// derive_seed(random_seed(), node name) (kiln/random.h; a gradient-checkpointing copy
// "<node>/recompute" is keyed on its original's name, so it draws the same mask); a run's mask is
// drawn from derive_seed(seed, the Session's run index): the same seed gives the same sequence of masks,
// successive runs draw different masks, and a resumed run (Session::set_run_count) draws the masks
// the interrupted one would have. ratio = 0 is the identity in both modes, as the spec says.
//
// Its gradient, ai.kiln.DropoutGrad, is in dropout_grad.cpp.
#include <fmt/format.h>

#include <cstring>

#include "kernels/cpu/dropout_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"
#include "kiln/random.h"

namespace kiln::dropout {

void check_ratio(double ratio) {
  if (!(ratio >= 0.0 && ratio < 1.0)) throw InvalidModel(fmt::format("ratio must be in [0, 1), got {}", ratio));
}

// Opset 12 on: ratio (default 0.5) and training_mode (default false) are optional inputs. Returns
// the ratio to drop with: 0 means the identity (inference, or a zero ratio).
double drop_ratio(const Tensor* ratio, const Tensor* training_mode) {
  const double r = ratio ? ratio->contiguous().item_as_double(0) : 0.5;
  check_ratio(r);
  const bool training = training_mode && training_mode->contiguous().item_as_double(0) != 0.0;
  return training ? r : 0.0;
}

// ratio and training_mode are inputs r and r + 1 (Dropout: 1 and 2; DropoutGrad: 2 and 3).
void check_mode_inputs(const InferContext& ctx, size_t r) {
  if (ctx.has_input(r) && (!is_floating(ctx.dtype(r)) || numel(ctx.shape(r)) != 1))
    throw TypeError(fmt::format("ratio must be a floating-point scalar, got {}{}", dtype_name(ctx.dtype(r)),
                                to_string(ctx.shape(r))));
  if (ctx.has_input(r + 1) && (ctx.dtype(r + 1) != DType::Bool || numel(ctx.shape(r + 1)) != 1))
    throw TypeError(fmt::format("training_mode must be a bool scalar, got {}{}", dtype_name(ctx.dtype(r + 1)),
                                to_string(ctx.shape(r + 1))));
  if (ctx.has_value(r)) check_ratio(ctx.input(r).value.contiguous().item_as_double(0));
}

}  // namespace kiln::dropout

namespace kiln {
namespace {

using dropout::check_mode_inputs;
using dropout::check_ratio;
using dropout::drop_ratio;
using dropout::visit_float;

class DropoutKernel : public Kernel {
 public:
  explicit DropoutKernel(const Node& n)
      : Kernel(n),
        seed_(n.has_attr("seed") ? derive_seed(static_cast<uint64_t>(n.attr_int("seed")), "Dropout.seed")
                                 : derive_seed(random_seed(), random_stream_name(n.name))) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& in = ctx.input(0);
    if (ctx.opset >= 12) check_mode_inputs(ctx, 1);
    else check_ratio(node_.attr_float("ratio", 0.5f));
    std::vector<TensorMeta> out{{in.dtype, in.shape, in.dynamic, Tensor()}};
    // Before opset 10 the mask had the input's type; from 10 it is bool.
    if (node_.outputs.size() > 1)
      out.push_back({ctx.opset >= 10 ? DType::Bool : in.dtype, in.shape, in.dynamic, Tensor()});
    return out;
  }

  void compute(ComputeContext& ctx) override {
    const double ratio =
        drop_ratio(ctx.has_input(1) ? &ctx.input(1) : nullptr, ctx.has_input(2) ? &ctx.input(2) : nullptr);
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    Tensor* mask = ctx.outputs.size() > 1 && ctx.outputs[1] && ctx.outputs[1]->defined() ? ctx.outputs[1] : nullptr;
    if (ratio == 0.0) {
      if (out.raw_data() != in.raw_data() && in.nbytes() > 0) std::memcpy(out.raw_data(), in.raw_data(), in.nbytes());
      if (mask) fill_true(*mask);
      return;
    }
    // The draws are serial so that the masks do not depend on the thread count.
    const double keep_scale = 1.0 / (1.0 - ratio);
    std::mt19937_64 rng(derive_seed(seed_, ctx.run_index));
    visit_float(in.dtype(), "Dropout", [&](auto tag) {
      using T = decltype(tag);
      const T* x = in.data<T>();
      T* y = out.data<T>();
      bool* m = mask ? mask->data<bool>() : nullptr;
      for (int64_t i = 0; i < in.numel(); ++i) {
        const bool keep = uniform01(rng) >= ratio;
        y[i] = keep ? from_double<T>(to_double(x[i]) * keep_scale) : from_double<T>(0.0);
        if (m) m[i] = keep;
      }
    });
  }

  std::optional<size_t> inplace_input() const override { return 0; }
  // Training-mode results are random draws: never computed at plan time.
  bool foldable() const override { return node_.inputs.size() < 3 || node_.inputs[2].empty(); }

 private:
  static void fill_true(Tensor& mask) {
    visit_dtype(mask.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = mask.data<T>();
      const T one = from_double<T>(1.0);
      for (int64_t i = 0; i < mask.numel(); ++i) p[i] = one;
    });
  }

  uint64_t seed_;  // the node's; a run's draws come from derive_seed(seed_, run index)
};

const KernelRegistrar reg_dropout({"", "Dropout", 7, kMaxOpset, {}},
                                  [](const Node& n) { return std::make_unique<DropoutKernel>(n); });
}  // namespace
}  // namespace kiln

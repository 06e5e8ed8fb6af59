// ai.kiln.AdamWStep and ai.kiln.SGDStep: one update of one parameter with the arithmetic of
// PyTorch 1.13's torch.optim.AdamW / torch.optim.SGD (single-tensor path, foreach=False, CPU), so
// that a model trained by Kiln follows PyTorch's trajectory bit for bit (tests/python/
// test_optimizer_ops.py sees no difference over 10 steps).
//
// How torch computes, and so do these loops: hyperparameters are Python floats (doubles); scalar
// factors such as 1 - lr*wd or lr / (1 - beta1**t) are computed in double and rounded once to the
// parameter's dtype; every tensor op rounds its result; add(..., alpha=) and addcmul run as fused
// multiply-adds in torch's AVX2 kernels (measured on Debian's 1.13), which std::fma reproduces.
//
// The training Optimizer runs these kernels in place (X_new is X's tensor, M_new is M's...), the
// planner with separate buffers: each loop reads all of element i before it writes element i.
#include <fmt/format.h>

#include <cmath>

#include "kernels/cpu/optimizer_common.h"
#include "kernels/cpu/optimizer_loops.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using optim::adamw_hf;
using optim::adamw_torch;
using optim::AdamWArgs;
using optim::check_same_tensors;
using optim::decimal_attr;
using optim::learning_rate;
using optim::parallel_simd_loop;
using optim::sgd_torch;
using optim::SGDArgs;
using optim::step_number;

class AdamWStep final : public Kernel {
 public:
  explicit AdamWStep(const Node& n)
      : Kernel(n),
        beta1_(decimal_attr(n, "beta1", 0.9f)),
        beta2_(decimal_attr(n, "beta2", 0.999f)),
        eps_(decimal_attr(n, "epsilon", 1e-8f)),
        weight_decay_(decimal_attr(n, "weight_decay", 0.01f)),
        maximize_(n.attr_int("maximize", 0) != 0),
        hf_(n.attr_string("variant", "torch") == "hf") {
    const std::string variant = n.attr_string("variant", "torch");
    if (variant != "torch" && variant != "hf")
      throw InvalidArgument(fmt::format("AdamWStep: variant '{}' is not one of 'torch', 'hf'", variant));
    if (hf_ && maximize_) throw InvalidArgument("AdamWStep: the 'hf' variant has no maximize");
    // torch.optim.AdamW's own checks.
    optim::check_adam_hyperparameters("AdamWStep", beta1_, beta2_, eps_, weight_decay_);
  }

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    return optim::infer_moment_update(ctx, "AdamWStep");
  }

  void compute(ComputeContext& ctx) override {
    if (ctx.input(2).dtype() == DType::Float32) return run<float>(ctx);
    run<double>(ctx);
  }

  std::optional<size_t> inplace_input() const override { return 2; }
  // Elementwise: the parameter and each slot may be updated in their own memory.
  bool output_may_overwrite(size_t output, size_t input) const override {
    return input == (output == 0 ? 2 : output + 3);  // X_new over X, slot k over its old value
  }

 private:
  // The operands and the factors both variants share; each variant sets decay, bc2_sqrt,
  // neg_step_size and flag.
  template <class T>
  AdamWArgs<T> operands(ComputeContext& ctx) const {
    return {.x = ctx.input(2).data<T>(),
            .g = ctx.input(3).data<T>(),
            .m = ctx.input(4).data<T>(),
            .v = ctx.input(5).data<T>(),
            .x_out = ctx.output(0).data<T>(),
            .m_out = ctx.output(1).data<T>(),
            .v_out = ctx.output(2).data<T>(),
            .b1 = static_cast<T>(beta1_),
            .one_minus_b1 = static_cast<T>(1 - beta1_),
            .b2 = static_cast<T>(beta2_),
            .one_minus_b2 = static_cast<T>(1 - beta2_),
            .eps = static_cast<T>(eps_)};
  }

  template <class T>
  void run(ComputeContext& ctx) const {
    const double lr = learning_rate(ctx, "AdamWStep");
    const auto t = static_cast<double>(step_number(ctx, "AdamWStep"));
    const double bias_correction1 = 1 - std::pow(beta1_, t);
    const double bias_correction2 = 1 - std::pow(beta2_, t);
    AdamWArgs<T> args = operands<T>(ctx);
    if (hf_) {
      // transformers.AdamW (HF's own, optim="adamw_hf"): eps added to sqrt(v) before the bias
      // correction, which goes into the step size; weight decay applied after the update.
      args.decay = static_cast<T>(-lr * weight_decay_);
      args.bc2_sqrt = T{1};
      args.neg_step_size = static_cast<T>(-(lr * std::sqrt(bias_correction2) / bias_correction1));
      args.flag = weight_decay_ > 0;
      return parallel_simd_loop<adamw_hf<T>>(ctx.input(2).numel(), args);
    }
    args.decay = static_cast<T>(1 - lr * weight_decay_);
    args.bc2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
    args.neg_step_size = static_cast<T>(-(lr / bias_correction1));
    args.flag = maximize_;
    parallel_simd_loop<adamw_torch<T>>(ctx.input(2).numel(), args);
  }

  double beta1_, beta2_, eps_, weight_decay_;
  bool maximize_;
  bool hf_;  // variant "hf": transformers.AdamW
};

class SGDStep final : public Kernel {
 public:
  explicit SGDStep(const Node& n)
      : Kernel(n),
        momentum_(decimal_attr(n, "momentum", 0.f)),
        dampening_(decimal_attr(n, "dampening", 0.f)),
        weight_decay_(decimal_attr(n, "weight_decay", 0.f)),
        nesterov_(n.attr_int("nesterov", 0) != 0),
        maximize_(n.attr_int("maximize", 0) != 0) {
    // torch.optim.SGD's own checks.
    if (!(momentum_ >= 0)) throw InvalidArgument(fmt::format("SGDStep: momentum = {} must be >= 0", momentum_));
    if (!(weight_decay_ >= 0))
      throw InvalidArgument(fmt::format("SGDStep: weight_decay = {} must be >= 0", weight_decay_));
    if (nesterov_ && (momentum_ <= 0 || dampening_ != 0))
      throw InvalidArgument(
          fmt::format("SGDStep: nesterov needs momentum > 0 and dampening == 0 (got momentum = {}, dampening = {})",
                      momentum_, dampening_));
  }

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (ctx.num_inputs() < 4 || ctx.num_inputs() > 5)
      throw InvalidModel(fmt::format(
          "SGDStep takes 4 or 5 inputs (learning_rate, step, X, G[, momentum_buffer]), got {}", ctx.num_inputs()));
    optim::check_scalars(ctx, "SGDStep");
    const bool has_buffer = ctx.has_input(4);
    if (has_buffer != (momentum_ != 0))
      throw InvalidArgument(
          fmt::format("SGDStep: momentum_buffer must be given exactly when momentum != 0 "
                      "(momentum = {}, momentum_buffer {})",
                      momentum_, has_buffer ? "given" : "omitted"));
    if (has_buffer) check_same_tensors(ctx, "SGDStep", {{2, "X"}, {3, "G"}, {4, "momentum_buffer"}});
    else check_same_tensors(ctx, "SGDStep", {{2, "X"}, {3, "G"}});
    const size_t outputs = has_buffer ? 2 : 1;
    if (node_.outputs.size() > outputs)
      throw InvalidModel(
          fmt::format("SGDStep has {} output(s) without momentum, the node lists {}", outputs, node_.outputs.size()));
    const TensorMeta x{ctx.dtype(2), ctx.shape(2), false, Tensor()};
    return std::vector<TensorMeta>(outputs, x);
  }

  void compute(ComputeContext& ctx) override {
    if (ctx.input(2).dtype() == DType::Float32) return run<float>(ctx);
    run<double>(ctx);
  }

  std::optional<size_t> inplace_input() const override { return 2; }
  // Elementwise: the parameter and each slot may be updated in their own memory.
  bool output_may_overwrite(size_t output, size_t input) const override {
    return input == (output == 0 ? 2 : output + 3);  // X_new over X, slot k over its old value
  }

 private:
  template <class T>
  void run(ComputeContext& ctx) const {
    const double lr = learning_rate(ctx, "SGDStep");
    const bool first = step_number(ctx, "SGDStep") == 1;  // torch: no momentum buffer yet
    const T neg_lr = static_cast<T>(-lr);
    const T wd = static_cast<T>(weight_decay_);
    const T mom = static_cast<T>(momentum_);
    const T one_minus_damp = static_cast<T>(1 - dampening_);
    const bool use_momentum = momentum_ != 0;
    const SGDArgs<T> args{ctx.input(2).data<T>(),
                          ctx.input(3).data<T>(),
                          use_momentum ? ctx.input(4).data<T>() : nullptr,
                          ctx.output(0).data<T>(),
                          use_momentum ? ctx.output(1).data<T>() : nullptr,
                          neg_lr,
                          wd,
                          mom,
                          one_minus_damp,
                          first,
                          weight_decay_ != 0,
                          use_momentum,
                          nesterov_,
                          maximize_};
    parallel_simd_loop<sgd_torch<T>>(ctx.input(2).numel(), args);
  }

  double momentum_, dampening_, weight_decay_;
  bool nesterov_, maximize_;
};

const std::vector<DType> kFloatTypes = {DType::Float32, DType::Float64};

const KernelRegistrar adamw_reg({kKilnDomain, "AdamWStep", 1, kMaxOpset, kFloatTypes, 2},
                                [](const Node& n) { return std::make_unique<AdamWStep>(n); });
const KernelRegistrar sgd_reg({kKilnDomain, "SGDStep", 1, kMaxOpset, kFloatTypes, 2},
                              [](const Node& n) { return std::make_unique<SGDStep>(n); });

const OpDocRegistrar adamw_doc(
    {kKilnDomain,
     "AdamWStep",
     "One torch.optim.AdamW update (PyTorch 1.13, single-tensor) of one parameter and its moments. "
     "Attributes: beta1 (0.9), beta2 (0.999), epsilon (1e-8), weight_decay (0.01), maximize (0). Float "
     "attributes and a float32 learning rate are read as the shortest decimal that rounds to them (0.9f "
     "as 0.9), as torch holds them in Python floats. Outputs may be the inputs' own tensors (in place). "
     "variant 'hf' (default 'torch') is transformers.AdamW instead: denom = sqrt(V_new) + epsilon, "
     "X_new = X - lr*sqrt(1 - beta2^t)/(1 - beta1^t) * M_new / denom, then X_new += -lr*weight_decay * X_new.",
     {"learning_rate: float scalar", "step: int64 scalar t >= 1, counting this update",
      "X: the parameter (float32 or float64)", "G: its gradient, X's shape", "M: the first moment (exp_avg)",
      "V: the second moment (exp_avg_sq)"},
     {"X_new: the updated parameter", "M_new: the updated first moment", "V_new: the updated second moment"},
     "g = -G if maximize else G;  X' = X * (1 - lr*weight_decay);  M_new = M*beta1 + (1-beta1)*g;  "
     "V_new = V*beta2 + (1-beta2)*g*g;  denom = sqrt(V_new) / sqrt(1 - beta2^t) + epsilon;  "
     "X_new = X' - (lr / (1 - beta1^t)) * M_new / denom.  Scalar factors in double, rounded once to X's "
     "dtype; element ops in X's dtype, the M and V updates as fused multiply-adds (as torch's AVX2 kernels)"});

const OpDocRegistrar sgd_doc(
    {kKilnDomain,
     "SGDStep",
     "One torch.optim.SGD update (PyTorch 1.13, single-tensor) of one parameter and its momentum buffer. "
     "Attributes: momentum (0), dampening (0), weight_decay (0), nesterov (0; needs momentum > 0 and "
     "dampening == 0), maximize (0). Float attributes and a float32 learning rate are read as the shortest "
     "decimal that rounds to them. Outputs may be the inputs' own tensors (in place).",
     {"learning_rate: float scalar", "step: int64 scalar t >= 1, counting this update",
      "X: the parameter (float32 or float64)", "G: its gradient, X's shape",
      "momentum_buffer: optional, given exactly when momentum != 0; ignored at t = 1"},
     {"X_new: the updated parameter", "momentum_buffer_new: the updated buffer, present iff momentum_buffer is"},
     "d = -G if maximize else G;  if weight_decay != 0: d = d + weight_decay*X;  if momentum != 0: "
     "buf = d if t == 1 else momentum*buf + (1-dampening)*d;  d = d + momentum*buf if nesterov else buf;  "
     "X_new = X - lr*d.  Each '+ s*y' with a scalar s is one fused multiply-add in X's dtype (torch's add with "
     "alpha)"});

}  // namespace
}  // namespace kiln

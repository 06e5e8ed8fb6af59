// ai.kiln.AdagradStep: one update of one parameter with the arithmetic of PyTorch 1.13's
// torch.optim.Adagrad (single-tensor path, CPU; the Hugging Face Trainer's optim="adagrad"):
//
//   g = -G if maximize else G;  g = g + weight_decay * X (when weight_decay != 0)
//   clr = lr / (1 + (t - 1) * lr_decay)
//   sum = (initial_accumulator_value at t = 1, else sum) + g * g
//   X_new = X - clr * g / (sqrt(sum) + epsilon)
//
// Scalars are computed in double and rounded once to X's dtype; add(alpha=) and addcmul run as fused
// multiply-adds, as in optimizer_kiln.cpp (its comment says why).
#include <fmt/format.h>

#include <cmath>

#include "kernels/cpu/optimizer_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using optim::decimal_attr;
using optim::learning_rate;
using optim::parallel_simd_loop;
using optim::step_number;

template <class T>
struct AdagradArgs {
  const T *x, *g, *sum;
  T *x_out, *sum_out;
  T neg_clr, wd, eps, init;
  bool first, use_wd, maximize;
};

template <class T>
[[gnu::always_inline]] inline void adagrad_torch(const AdagradArgs<T>& a, int64_t begin, int64_t end) {
  const T *x = a.x, *g = a.g, *sum = a.sum;
  T *x_out = a.x_out, *sum_out = a.sum_out;
  const T neg_clr = a.neg_clr, wd = a.wd, eps = a.eps, init = a.init;
  const bool first = a.first, use_wd = a.use_wd, maximize = a.maximize;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const T xi = x[i];
    T d = maximize ? -g[i] : g[i];
    if (use_wd) d = std::fma(xi, wd, d);                // grad.add(param, alpha=weight_decay)
    const T s = std::fma(d, d, first ? init : sum[i]);  // state_sum.addcmul_(grad, grad, value=1)
    const T denom = std::sqrt(s) + eps;                 // state_sum.sqrt().add_(eps)
    x_out[i] = xi + (neg_clr * d) / denom;              // param.addcdiv_(grad, std, value=-clr)
    sum_out[i] = s;
  }
}

class AdagradStep final : public Kernel {
 public:
  explicit AdagradStep(const Node& n)
      : Kernel(n),
        lr_decay_(decimal_attr(n, "lr_decay", 0.f)),
        weight_decay_(decimal_attr(n, "weight_decay", 0.f)),
        eps_(decimal_attr(n, "epsilon", 1e-10f)),
        init_(decimal_attr(n, "initial_accumulator_value", 0.f)),
        maximize_(n.attr_int("maximize", 0) != 0) {
    // torch.optim.Adagrad's own checks.
    if (!(lr_decay_ >= 0)) throw InvalidArgument(fmt::format("AdagradStep: lr_decay = {} must be >= 0", lr_decay_));
    if (!(weight_decay_ >= 0))
      throw InvalidArgument(fmt::format("AdagradStep: weight_decay = {} must be >= 0", weight_decay_));
    if (!(init_ >= 0))
      throw InvalidArgument(fmt::format("AdagradStep: initial_accumulator_value = {} must be >= 0", init_));
    if (!(eps_ >= 0)) throw InvalidArgument(fmt::format("AdagradStep: epsilon = {} must be >= 0", eps_));
  }

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (ctx.num_inputs() != 5)
      throw InvalidModel(
          fmt::format("AdagradStep takes 5 inputs (learning_rate, step, X, G, sum), got {}", ctx.num_inputs()));
    optim::check_scalars(ctx, "AdagradStep");
    optim::check_same_tensors(ctx, "AdagradStep", {{2, "X"}, {3, "G"}, {4, "sum"}});
    if (node_.outputs.size() > 2)
      throw InvalidModel(fmt::format("AdagradStep has 2 outputs, the node lists {}", node_.outputs.size()));
    const TensorMeta x{ctx.dtype(2), ctx.shape(2), false, Tensor()};
    return {x, x};
  }

  void compute(ComputeContext& ctx) override {
    if (ctx.input(2).dtype() == DType::Float32) return run<float>(ctx);
    run<double>(ctx);
  }

  std::optional<size_t> inplace_input() const override { return 2; }
  bool output_may_overwrite(size_t output, size_t input) const override {
    return input == (output == 0 ? 2 : output + 3);  // X_new over X, sum_new over sum
  }

 private:
  template <class T>
  void run(ComputeContext& ctx) const {
    const double lr = learning_rate(ctx, "AdagradStep");
    const int64_t t = step_number(ctx, "AdagradStep");
    const double clr = lr / (1 + static_cast<double>(t - 1) * lr_decay_);
    const AdagradArgs<T> args{ctx.input(2).data<T>(),
                              ctx.input(3).data<T>(),
                              ctx.input(4).data<T>(),
                              ctx.output(0).data<T>(),
                              ctx.output(1).data<T>(),
                              static_cast<T>(-clr),
                              static_cast<T>(weight_decay_),
                              static_cast<T>(eps_),
                              static_cast<T>(init_),
                              t == 1,
                              weight_decay_ != 0,
                              maximize_};
    parallel_simd_loop<adagrad_torch<T>>(ctx.input(2).numel(), args);
  }

  double lr_decay_, weight_decay_, eps_, init_;
  bool maximize_;
};

const KernelRegistrar reg({kKilnDomain, "AdagradStep", 1, kMaxOpset, {DType::Float32, DType::Float64}, 2},
                          [](const Node& n) { return std::make_unique<AdagradStep>(n); });

const OpDocRegistrar doc(
    {kKilnDomain,
     "AdagradStep",
     "One torch.optim.Adagrad update (PyTorch 1.13, single-tensor) of one parameter and its sum of squared "
     "gradients. Attributes: lr_decay (0), weight_decay (0), epsilon (1e-10), initial_accumulator_value (0: the "
     "sum before the first step), maximize (0). Float attributes and a float32 learning rate are read as the "
     "shortest decimal that rounds to them. Outputs may be the inputs' own tensors (in place).",
     {"learning_rate: float scalar", "step: int64 scalar t >= 1, counting this update",
      "X: the parameter (float32 or float64)", "G: its gradient, X's shape",
      "sum: the sum of squared gradients, X's shape; read as initial_accumulator_value at t = 1"},
     {"X_new: the updated parameter", "sum_new: the updated sum"},
     "g = -G if maximize else G;  if weight_decay != 0: g = g + weight_decay*X;  clr = lr / (1 + (t-1)*lr_decay);  "
     "sum_new = (initial_accumulator_value if t == 1 else sum) + g*g;  X_new = X - clr*g / (sqrt(sum_new) + "
     "epsilon).  '+ s*y' and the g*g accumulation are fused multiply-adds in X's dtype (torch's add with alpha "
     "and addcmul)"});

}  // namespace
}  // namespace kiln

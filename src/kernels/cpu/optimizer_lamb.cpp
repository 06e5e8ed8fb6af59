// ai.kiln.LambStep: one LAMB update of one parameter (You et al., "Large Batch Optimization for Deep
// Learning: Training BERT in 76 minutes", 2019, Algorithm 2), the optimizer Graphcore's IPUTrainer
// offers as `lamb` / `lamb_no_bias_correction` (poptorch.optim.LAMB's hyperparameters and defaults):
//
//   m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g
//   r = (m / bc1) / (sqrt(v / bc2) + epsilon)      bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (or 1, 1)
//   u = r + weight_decay * x
//   trust = phi(||x||) / ||u||   (1 when either norm is 0; phi clamps at max_weight_norm if given)
//   x = x - lr * trust * u
//
// The norms are sums over fixed blocks of 8192 elements in double, added in block order, so the
// result does not depend on the thread count. The update is computed twice (once for the norm,
// once to apply it) from the same values, so both passes see the same u.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/optimizer_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using optim::decimal_attr;
using optim::learning_rate;
using optim::step_number;

constexpr int64_t kBlock = 8192;

class LambStep final : public Kernel {
 public:
  explicit LambStep(const Node& n)
      : Kernel(n),
        beta1_(decimal_attr(n, "beta1", 0.9f)),
        beta2_(decimal_attr(n, "beta2", 0.999f)),
        eps_(decimal_attr(n, "epsilon", 1e-8f)),
        weight_decay_(decimal_attr(n, "weight_decay", 0.01f)),
        max_weight_norm_(n.has_attr("max_weight_norm") ? decimal_attr(n, "max_weight_norm", 0.f) : -1.0),
        bias_correction_(n.attr_int("bias_correction", 1) != 0) {
    optim::check_adam_hyperparameters("LambStep", beta1_, beta2_, eps_, weight_decay_);
    if (n.has_attr("max_weight_norm") && !(max_weight_norm_ >= 0))
      throw InvalidArgument(fmt::format("LambStep: max_weight_norm = {} must be >= 0", max_weight_norm_));
  }

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    return optim::infer_moment_update(ctx, "LambStep");
  }

  void compute(ComputeContext& ctx) override {
    if (ctx.input(2).dtype() == DType::Float32) return run<float>(ctx);
    run<double>(ctx);
  }

  std::optional<size_t> inplace_input() const override { return 2; }
  // Each pass reads element i of its inputs before writing element i of its outputs.
  bool output_may_overwrite(size_t output, size_t input) const override {
    return input == (output == 0 ? 2 : output + 3);
  }

 private:
  template <class T>
  struct Factors {
    T b1, one_minus_b1, b2, one_minus_b2, inv_bc1, inv_bc2, eps, wd;
  };

  // u for element i from the updated moments and the parameter.
  template <class T>
  static T update(const Factors<T>& f, T m, T v, T x) {
    const T r = (m * f.inv_bc1) / (std::sqrt(v * f.inv_bc2) + f.eps);
    return std::fma(f.wd, x, r);
  }

  template <class T>
  void run(ComputeContext& ctx) const {
    const double lr = learning_rate(ctx, "LambStep");
    const auto t = static_cast<double>(step_number(ctx, "LambStep"));
    const double bc1 = bias_correction_ ? 1 - std::pow(beta1_, t) : 1.0;
    const double bc2 = bias_correction_ ? 1 - std::pow(beta2_, t) : 1.0;
    const Factors<T> f{static_cast<T>(beta1_),     static_cast<T>(1 - beta1_),   static_cast<T>(beta2_),
                       static_cast<T>(1 - beta2_), static_cast<T>(1 / bc1),      static_cast<T>(1 / bc2),
                       static_cast<T>(eps_),       static_cast<T>(weight_decay_)};
    const T* x = ctx.input(2).data<T>();
    const T* g = ctx.input(3).data<T>();
    const T* m = ctx.input(4).data<T>();
    const T* v = ctx.input(5).data<T>();
    T* x_out = ctx.output(0).data<T>();
    T* m_out = ctx.output(1).data<T>();
    T* v_out = ctx.output(2).data<T>();
    const int64_t n = ctx.input(2).numel();
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    std::vector<double> w_sq(static_cast<size_t>(blocks)), u_sq(static_cast<size_t>(blocks));
    // Pass 1: the moments, and the squared norms of x and u block by block.
    parallel_for(blocks, 4, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        double ws = 0, us = 0;
        for (int64_t i = b * kBlock, e = std::min(n, i + kBlock); i < e; ++i) {
          const T gi = g[i], xi = x[i];
          const T mi = std::fma(gi, f.one_minus_b1, m[i] * f.b1);
          const T vi = std::fma(f.one_minus_b2 * gi, gi, v[i] * f.b2);
          const T ui = update(f, mi, vi, xi);
          m_out[i] = mi;
          v_out[i] = vi;
          ws += static_cast<double>(xi) * xi;
          us += static_cast<double>(ui) * ui;
        }
        w_sq[static_cast<size_t>(b)] = ws;
        u_sq[static_cast<size_t>(b)] = us;
      }
    });
    double ws = 0, us = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      ws += w_sq[static_cast<size_t>(b)];
      us += u_sq[static_cast<size_t>(b)];
    }
    double w_norm = std::sqrt(ws);
    if (max_weight_norm_ >= 0) w_norm = std::min(w_norm, max_weight_norm_);
    const double u_norm = std::sqrt(us);
    const double trust = (w_norm > 0 && u_norm > 0) ? w_norm / u_norm : 1.0;
    const T neg_step = static_cast<T>(-lr * trust);
    // Pass 2: the parameter, from the same u.
    parallel_for(n, optim::kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) x_out[i] = std::fma(neg_step, update(f, m_out[i], v_out[i], x[i]), x[i]);
    });
  }

  double beta1_, beta2_, eps_, weight_decay_;
  double max_weight_norm_;  // < 0: no clamp
  bool bias_correction_;
};

const KernelRegistrar lamb_reg({kKilnDomain, "LambStep", 1, kMaxOpset, {DType::Float32, DType::Float64}, 2},
                               [](const Node& n) { return std::make_unique<LambStep>(n); });

const OpDocRegistrar lamb_doc(
    {kKilnDomain,
     "LambStep",
     "One LAMB update (You et al. 2019, Algorithm 2; poptorch.optim.LAMB's hyperparameters) of one "
     "parameter and its moments. Attributes: beta1 (0.9), beta2 (0.999), epsilon (1e-8), weight_decay "
     "(0.01), bias_correction (1), max_weight_norm (absent: no clamp). Outputs may be the inputs' own "
     "tensors (in place). The norms are summed in double over fixed blocks, independent of threads.",
     {"learning_rate: float scalar", "step: int64 scalar t >= 1, counting this update",
      "X: the parameter (float32 or float64)", "G: its gradient, X's shape", "M: the first moment",
      "V: the second moment"},
     {"X_new: the updated parameter", "M_new: the updated first moment", "V_new: the updated second moment"},
     "M_new = beta1*M + (1-beta1)*G;  V_new = beta2*V + (1-beta2)*G*G;  bc1 = 1 - beta1^t, bc2 = 1 - "
     "beta2^t (1 without bias_correction);  U = (M_new/bc1) / (sqrt(V_new/bc2) + epsilon) + weight_decay*X;  "
     "w = min(||X||, max_weight_norm);  trust = w / ||U|| (1 if either norm is 0);  X_new = X - lr*trust*U"});

}  // namespace
}  // namespace kiln

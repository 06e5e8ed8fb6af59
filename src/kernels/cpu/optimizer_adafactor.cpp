// ai.kiln.AdafactorStep: one update of one parameter with the arithmetic of Hugging Face's
// transformers.optimization.Adafactor (Shazeer & Stern 2018; the Trainer's optim="adafactor" runs it
// with scale_parameter=False, relative_step=False and the Trainer's learning rate). A parameter of
// rank >= 2 keeps its second moment factored: a row vector (the shape less its last axis) and a
// column vector (the shape less its second-to-last axis); one of rank < 2 keeps it whole. With
// beta1, a first moment of the update too.
//
//   lr_t = lr, or min(1e-6 t if warmup_init else 1e-2, 1/sqrt(t)) under relative_step;
//          times max(eps2, rms(X)) under scale_parameter
//   beta2t = 1 - t^decay_rate;  U = G*G + eps1
//   factored: R = beta2t R + (1 - beta2t) mean(U, -1);  C = beta2t C + (1 - beta2t) mean(U, -2)
//             u = G * rsqrt(R / mean(R, -1)) (per row) * rsqrt(C) (per column)
//   else:     V = beta2t V + (1 - beta2t) U;  u = G * rsqrt(V)
//   u = u / max(1, rms(u) / clip_threshold) * lr_t
//   beta1:    M = beta1 M + (1 - beta1) u;  u = M
//   X_new = X - weight_decay * lr_t * X (when weight_decay != 0) - u
//
// rms(t) = ||t||_2 / sqrt(numel). Sums are taken in double; elementwise values in X's dtype.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
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

// Inputs and outputs by position (an absent slot is an empty name).
constexpr size_t kRow = 4, kCol = 5, kSecond = 6, kFirst = 7;

template <class T>
double sum_of_squares(const T* v, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(v[i]) * static_cast<double>(v[i]);
  return s;
}

class AdafactorStep final : public Kernel {
 public:
  explicit AdafactorStep(const Node& n)
      : Kernel(n),
        eps1_(decimal_attr(n, "eps1", 1e-30f)),
        eps2_(decimal_attr(n, "eps2", 1e-3f)),
        clip_(decimal_attr(n, "clip_threshold", 1.0f)),
        decay_rate_(decimal_attr(n, "decay_rate", -0.8f)),
        weight_decay_(decimal_attr(n, "weight_decay", 0.f)),
        has_beta1_(n.attrs.count("beta1") > 0),
        beta1_(decimal_attr(n, "beta1", 0.f)),
        scale_parameter_(n.attr_int("scale_parameter", 1) != 0),
        relative_step_(n.attr_int("relative_step", 1) != 0),
        warmup_init_(n.attr_int("warmup_init", 0) != 0) {
    if (!(eps1_ >= 0) || !(eps2_ >= 0))
      throw InvalidArgument(fmt::format("AdafactorStep: eps1 = {} and eps2 = {} must be >= 0", eps1_, eps2_));
    if (!(clip_ > 0)) throw InvalidArgument(fmt::format("AdafactorStep: clip_threshold = {} must be > 0", clip_));
    if (!(decay_rate_ < 0))
      throw InvalidArgument(
          fmt::format("AdafactorStep: decay_rate = {} must be < 0 (beta2 = 1 - t^decay_rate)", decay_rate_));
    if (has_beta1_ && !(beta1_ >= 0 && beta1_ < 1))
      throw InvalidArgument(fmt::format("AdafactorStep: beta1 = {} must lie in [0, 1)", beta1_));
    if (!(weight_decay_ >= 0))
      throw InvalidArgument(fmt::format("AdafactorStep: weight_decay = {} must be >= 0", weight_decay_));
    if (warmup_init_ && !relative_step_)
      throw InvalidArgument("AdafactorStep: warmup_init requires relative_step (as transformers' Adafactor)");
  }

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    optim::check_scalars(ctx, "AdafactorStep");
    optim::check_same_tensors(ctx, "AdafactorStep", {{2, "X"}, {3, "G"}});
    const Shape& x = ctx.shape(2);
    const bool factored = x.size() >= 2;
    auto want = [&](size_t i, bool present, const char* name, const Shape& shape) {
      if (ctx.has_input(i) != present)
        throw InvalidModel(fmt::format("AdafactorStep: input {} ({}) must be {} for a parameter of shape {}{}", i, name,
                                       present ? "given" : "omitted", to_string(x),
                                       i == kFirst ? " (given exactly when the node has a beta1 attribute)"
                                                   : " (factored when its rank is >= 2)"));
      if (!present) return;
      if (ctx.dtype(i) != ctx.dtype(2))
        throw TypeError(fmt::format("AdafactorStep: {} is {} but X is {}", name, dtype_name(ctx.dtype(i)),
                                    dtype_name(ctx.dtype(2))));
      if (ctx.shape(i) != shape)
        throw ShapeError(fmt::format("AdafactorStep: {} has shape {}; for X of shape {} it must be {}", name,
                                     to_string(ctx.shape(i)), to_string(x), to_string(shape)));
    };
    Shape row = x, col = x;
    if (factored) {
      row.pop_back();
      col.erase(col.end() - 2);
    }
    want(kRow, factored, "exp_avg_sq_row", row);
    want(kCol, factored, "exp_avg_sq_col", col);
    want(kSecond, !factored, "exp_avg_sq", x);
    want(kFirst, has_beta1_, "exp_avg", x);
    if (ctx.num_inputs() > kFirst + 1)
      throw InvalidModel(fmt::format("AdafactorStep takes at most 8 inputs, got {}", ctx.num_inputs()));
    // An absent slot's output position is empty: nothing to plan for it.
    std::vector<TensorMeta> out(node_.outputs.size(), TensorMeta{ctx.dtype(2), Shape{0}, false, Tensor()});
    out[0].shape = x;
    for (size_t k = 1; k < out.size(); ++k)
      if (ctx.has_input(3 + k)) out[k].shape = ctx.shape(3 + k);
    return out;
  }

  void compute(ComputeContext& ctx) override {
    if (ctx.input(2).dtype() == DType::Float32) return run<float>(ctx);
    run<double>(ctx);
  }

  std::optional<size_t> inplace_input() const override { return 2; }
  bool output_may_overwrite(size_t output, size_t input) const override {
    return input == (output == 0 ? 2 : output + 3);  // X_new over X, each slot's new value over it
  }

 private:
  // Buffers kept from step to step, so that a step allocates nothing once the first has sized them.
  template <class T>
  struct Scratch {
    std::vector<T> update, row_factor, col_factor;
    std::vector<double> col_sum;
  };

  template <class T>
  Scratch<T>& scratch() {
    if constexpr (std::is_same_v<T, float>) return scratch_f_;
    else return scratch_d_;
  }

  template <class T>
  void run(ComputeContext& ctx) {
    const Tensor& x_in = ctx.input(2);
    const T* x = x_in.data<T>();
    const T* g = ctx.input(3).data<T>();
    const int64_t n = x_in.numel();
    const int64_t t = step_number(ctx, "AdafactorStep");
    double lr = learning_rate(ctx, "AdafactorStep");
    if (relative_step_)
      lr = std::min(warmup_init_ ? 1e-6 * static_cast<double>(t) : 1e-2, 1.0 / std::sqrt(static_cast<double>(t)));
    if (scale_parameter_) lr *= std::max(eps2_, std::sqrt(sum_of_squares(x, n) / static_cast<double>(n)));
    const T beta2t = static_cast<T>(1.0 - std::pow(static_cast<double>(t), decay_rate_));
    const T keep = static_cast<T>(std::pow(static_cast<double>(t), decay_rate_));  // alpha = 1 - beta2t
    const T eps1 = static_cast<T>(eps1_);
    Scratch<T>& buffers = scratch<T>();
    std::vector<T>& update = buffers.update;
    update.resize(static_cast<size_t>(n));
    if (x_in.rank() >= 2) factored_update(ctx, g, beta2t, keep, eps1, buffers);
    else whole_update(ctx, g, n, beta2t, keep, eps1, update.data());
    const double rms = std::sqrt(sum_of_squares(update.data(), n) / static_cast<double>(n));
    const T clip = static_cast<T>(std::max(1.0, rms / clip_)), lr_t = static_cast<T>(lr);
    T* u = update.data();
    if (has_beta1_) {
      const T b1 = static_cast<T>(beta1_), b1c = static_cast<T>(1.0 - beta1_);
      const T* m = ctx.input(kFirst).data<T>();
      T* m_out = ctx.output(kFirst - 3).data<T>();
      parallel_for(n, optim::kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) u[i] = m_out[i] = m[i] * b1 + ((u[i] / clip) * lr_t) * b1c;
      });
    } else {
      parallel_for(n, optim::kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) u[i] = (u[i] / clip) * lr_t;
      });
    }
    const T decay = static_cast<T>(-weight_decay_ * lr);
    const bool use_wd = weight_decay_ != 0;
    T* x_out = ctx.output(0).data<T>();
    parallel_for(n, optim::kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        T xi = x[i];
        if (use_wd) xi = xi + xi * decay;
        x_out[i] = xi - u[i];
      }
    });
  }

  template <class T>
  static void whole_update(ComputeContext& ctx, const T* g, int64_t n, T beta2t, T keep, T eps1, T* u) {
    const T* v = ctx.input(kSecond).data<T>();
    T* v_out = ctx.output(kSecond - 3).data<T>();
    parallel_for(n, optim::kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const T vi = v[i] * beta2t + (g[i] * g[i] + eps1) * keep;
        v_out[i] = vi;
        u[i] = (static_cast<T>(1) / std::sqrt(vi)) * g[i];  // rsqrt(V) * G
      }
    });
  }

  template <class T>
  static void factored_update(ComputeContext& ctx, const T* g, T beta2t, T keep, T eps1, Scratch<T>& buffers) {
    T* u = buffers.update.data();
    const Shape& shape = ctx.input(2).shape();
    const int64_t cols = shape.back(), rows = shape[shape.size() - 2];
    const int64_t batches = ctx.input(2).numel() / std::max<int64_t>(1, rows * cols);
    const T* row_in = ctx.input(kRow).data<T>();
    const T* col_in = ctx.input(kCol).data<T>();
    T* row_out = ctx.output(kRow - 3).data<T>();
    T* col_out = ctx.output(kCol - 3).data<T>();
    std::vector<double>& col_sum = buffers.col_sum;
    std::vector<T>&row_factor = buffers.row_factor, &col_factor = buffers.col_factor;
    col_sum.resize(static_cast<size_t>(cols));
    row_factor.resize(static_cast<size_t>(rows));
    col_factor.resize(static_cast<size_t>(cols));
    for (int64_t b = 0; b < batches; ++b) {
      const T* gb = g + b * rows * cols;
      std::fill(col_sum.begin(), col_sum.end(), 0.0);
      double row_total = 0;
      for (int64_t r = 0; r < rows; ++r) {
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const T gi = gb[r * cols + c];
          const double sq = static_cast<double>(gi * gi + eps1);
          s += sq;
          col_sum[static_cast<size_t>(c)] += sq;
        }
        const int64_t at = b * rows + r;
        const T next = row_in[at] * beta2t + static_cast<T>(s / static_cast<double>(cols)) * keep;
        row_out[at] = next;
        row_total += static_cast<double>(next);
      }
      const T row_mean = static_cast<T>(row_total / static_cast<double>(rows));
      for (int64_t r = 0; r < rows; ++r)
        row_factor[static_cast<size_t>(r)] = static_cast<T>(1) / std::sqrt(row_out[b * rows + r] / row_mean);
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t at = b * cols + c;
        const T next =
            col_in[at] * beta2t + static_cast<T>(col_sum[static_cast<size_t>(c)] / static_cast<double>(rows)) * keep;
        col_out[at] = next;
        col_factor[static_cast<size_t>(c)] = static_cast<T>(1) / std::sqrt(next);
      }
      T* ub = u + b * rows * cols;
      parallel_for(rows, std::max<int64_t>(1, optim::kGrain / std::max<int64_t>(1, cols)), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const T rf = row_factor[static_cast<size_t>(r)];
          for (int64_t c = 0; c < cols; ++c)
            ub[r * cols + c] = (rf * col_factor[static_cast<size_t>(c)]) * gb[r * cols + c];
        }
      });
    }
  }

  double eps1_, eps2_, clip_, decay_rate_, weight_decay_;
  bool has_beta1_;
  double beta1_;
  bool scale_parameter_, relative_step_, warmup_init_;
  Scratch<float> scratch_f_;
  Scratch<double> scratch_d_;
};

const KernelRegistrar reg({kKilnDomain, "AdafactorStep", 1, kMaxOpset, {DType::Float32, DType::Float64}, 2},
                          [](const Node& n) { return std::make_unique<AdafactorStep>(n); });

const OpDocRegistrar doc(
    {kKilnDomain,
     "AdafactorStep",
     "One update of one parameter by transformers' Adafactor (Shazeer & Stern 2018). A parameter of rank >= 2 "
     "keeps its second moment factored into a row and a column vector; one of rank < 2 keeps it whole; with "
     "beta1, a first moment of the update too. Attributes: eps1 (1e-30), eps2 (1e-3), clip_threshold (1), "
     "decay_rate (-0.8), beta1 (absent: no first moment), weight_decay (0), scale_parameter (1), relative_step "
     "(1), warmup_init (0). Outputs may be the inputs' own tensors (in place).",
     {"learning_rate: float scalar (unused under relative_step)", "step: int64 scalar t >= 1, counting this update",
      "X: the parameter (float32 or float64)", "G: its gradient, X's shape",
      "exp_avg_sq_row (optional): X's shape less its last axis; given when rank(X) >= 2",
      "exp_avg_sq_col (optional): X's shape less its second-to-last axis; given when rank(X) >= 2",
      "exp_avg_sq (optional): X's shape; given when rank(X) < 2",
      "exp_avg (optional): X's shape; given when the node has beta1"},
     {"X_new: the updated parameter", "exp_avg_sq_row_new", "exp_avg_sq_col_new", "exp_avg_sq_new", "exp_avg_new"},
     "lr_t = lr (relative_step: min(warmup_init ? 1e-6 t : 1e-2, 1/sqrt(t))) * (scale_parameter: max(eps2, "
     "rms(X)));  beta2t = 1 - t^decay_rate;  U = G*G + eps1;  factored: R = beta2t R + (1-beta2t) mean(U,-1), C = "
     "beta2t C + (1-beta2t) mean(U,-2), u = G rsqrt(R/mean(R,-1)) rsqrt(C); else V = beta2t V + (1-beta2t) U, u = "
     "G rsqrt(V);  u = lr_t u / max(1, rms(u)/clip_threshold);  beta1: M = beta1 M + (1-beta1) u, u = M;  X_new = "
     "X - weight_decay lr_t X - u"});

}  // namespace
}  // namespace kiln

// ONNX's optimizer ops, domain ai.onnx.preview.training opset 1, as its spec defines them:
// Adam, Momentum and Adagrad. Each updates n tensors at once: inputs R (learning rate), T (update
// count), then the n tensors of each group (X..., G..., V..., H...), outputs the new values group
// by group. Unlike ai.kiln.AdamWStep these follow ONNX's formulas (L2 regularisation through
// norm_coefficient, T = 0 meaning "no bias correction yet"), not PyTorch's.
//
// Every loop reads all of element i before it writes element i, so outputs may share their
// inputs' buffers (X_new over X in place).
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "core/parallel.h"
#include "kernels/cpu/optimizer_common.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

const std::string kTrainingDomain = "ai.onnx.preview.training";

// The shared shape of the three ops: `groups` input tensors and `outputs` output tensors per
// optimized tensor, the first group being X (whose dtype and shape the others share). Op::run<T>
// updates optimized tensor k.
template <class Op>
class PreviewOptimizer : public Kernel {
 public:
  PreviewOptimizer(const Node& n, const char* op, std::vector<std::string> group_names, size_t outputs)
      : Kernel(n), op_(op), group_names_(std::move(group_names)), outputs_(outputs) {
    const size_t groups = group_names_.size();
    const size_t variadic = n.inputs.size() < 2 ? 0 : n.inputs.size() - 2;
    if (variadic == 0 || variadic % groups != 0)
      throw InvalidModel(fmt::format("{}: takes R, T and {} groups of equally many tensors ({}), got {} inputs", op_,
                                     groups, fmt::join(group_names_, ", "), n.inputs.size()));
    n_ = variadic / groups;
    if (n.outputs.size() > outputs_ * n_)
      throw InvalidModel(fmt::format("{}: {} tensors to optimize give {} outputs, the node lists {}", op_, n_,
                                     outputs_ * n_, n.outputs.size()));
  }

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    optim::check_scalars(ctx, op_);
    const DType dtype = ctx.dtype(input_index(0, 0));
    std::vector<TensorMeta> out(outputs_ * n_);
    for (size_t k = 0; k < n_; ++k) {
      std::vector<std::pair<size_t, std::string>> tensors;
      for (size_t g = 0; g < group_names_.size(); ++g)
        tensors.emplace_back(input_index(g, k), fmt::format("{}{}", group_names_[g], k + 1));
      optim::check_same_tensors(ctx, op_, tensors);
      const TensorMeta x{ctx.dtype(input_index(0, k)), ctx.shape(input_index(0, k)), false, Tensor()};
      if (x.dtype != dtype)
        throw TypeError(fmt::format("{}: X{} is {} but X1 is {}; all optimized tensors share one dtype", op_, k + 1,
                                    dtype_name(x.dtype), dtype_name(dtype)));
      for (size_t o = 0; o < outputs_; ++o) out[o * n_ + k] = x;
    }
    return out;
  }

  void compute(ComputeContext& ctx) override {
    const double r = optim::rate_value(ctx);
    const int64_t t = optim::step_count(ctx);
    if (t < 0) throw InvalidArgument(fmt::format("{}: the update count T must be >= 0, got {}", op_, t));
    Op& op = static_cast<Op&>(*this);
    for (size_t k = 0; k < n_; ++k) {
      if (ctx.input(input_index(0, 0)).dtype() == DType::Float32) op.template run<float>(ctx, k, r, t);
      else op.template run<double>(ctx, k, r, t);
    }
  }

  std::optional<size_t> inplace_input() const override { return 2; }

 protected:
  size_t input_index(size_t group, size_t k) const { return 2 + group * n_ + k; }
  template <class T>
  const T* in(ComputeContext& ctx, size_t group, size_t k) const {
    return ctx.input(input_index(group, k)).template data<T>();
  }
  template <class T>
  T* out(ComputeContext& ctx, size_t group, size_t k) const {
    return ctx.output(group * n_ + k).template data<T>();
  }
  int64_t size(ComputeContext& ctx, size_t k) const { return ctx.input(input_index(0, k)).numel(); }

  const char* op_;

 private:
  std::vector<std::string> group_names_;
  size_t outputs_;
  size_t n_ = 0;
};

// Adam: inputs X..., G..., V..., H...; outputs X_new..., V_new..., H_new....
class Adam final : public PreviewOptimizer<Adam> {
 public:
  explicit Adam(const Node& n)
      : PreviewOptimizer<Adam>(n, "Adam", {"X", "G", "V", "H"}, 3),
        alpha_(optim::decimal_attr(n, "alpha", 0.9f)),
        beta_(optim::decimal_attr(n, "beta", 0.999f)),
        eps_(optim::decimal_attr(n, "epsilon", 1e-6f)),
        norm_(optim::decimal_attr(n, "norm_coefficient", 0.f)),
        norm_post_(optim::decimal_attr(n, "norm_coefficient_post", 0.f)) {}

  template <class T>
  void run(ComputeContext& ctx, size_t k, double r, int64_t t) {
    // T = 0: no bias correction (the spec's R_adjusted = R).
    const double td = static_cast<double>(t);
    const T r_adj = static_cast<T>(t > 0 ? r * std::sqrt(1 - std::pow(beta_, td)) / (1 - std::pow(alpha_, td)) : r);
    const T nc = static_cast<T>(norm_), alpha = static_cast<T>(alpha_), one_minus_alpha = static_cast<T>(1 - alpha_);
    const T beta = static_cast<T>(beta_), one_minus_beta = static_cast<T>(1 - beta_), eps = static_cast<T>(eps_);
    const T post = static_cast<T>(1 - norm_post_);
    const T *x = in<T>(ctx, 0, k), *g = in<T>(ctx, 1, k), *v = in<T>(ctx, 2, k), *h = in<T>(ctx, 3, k);
    T *x_out = out<T>(ctx, 0, k), *v_out = out<T>(ctx, 1, k), *h_out = out<T>(ctx, 2, k);
    parallel_for(size(ctx, k), optim::kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const T xi = x[i];
        const T g_reg = nc * xi + g[i];
        const T vi = alpha * v[i] + one_minus_alpha * g_reg;
        const T hi = beta * h[i] + one_minus_beta * (g_reg * g_reg);
        const T h_sqrt = std::sqrt(hi) + eps;
        x_out[i] = post * (xi - r_adj * (vi / h_sqrt));
        v_out[i] = vi;
        h_out[i] = hi;
      }
    });
  }

 private:
  double alpha_, beta_, eps_, norm_, norm_post_;
};

// Momentum: inputs X..., G..., V...; outputs X_new..., V_new.... mode "standard" or "nesterov".
class Momentum final : public PreviewOptimizer<Momentum> {
 public:
  explicit Momentum(const Node& n)
      : PreviewOptimizer<Momentum>(n, "Momentum", {"X", "G", "V"}, 2),
        alpha_(optim::decimal_value(n.attr_float("alpha"))),
        beta_(optim::decimal_value(n.attr_float("beta"))),
        norm_(optim::decimal_value(n.attr_float("norm_coefficient"))) {
    const std::string mode = n.attr_string("mode");
    if (mode != "standard" && mode != "nesterov")
      throw InvalidArgument(fmt::format("Momentum: mode must be \"standard\" or \"nesterov\", got \"{}\"", mode));
    nesterov_ = mode == "nesterov";
  }

  template <class T>
  void run(ComputeContext& ctx, size_t k, double r, int64_t t) {
    // The gradient's coefficient is 1 at the first update (T = 0).
    const T beta = static_cast<T>(t > 0 ? beta_ : 1.0);
    const T nc = static_cast<T>(norm_), alpha = static_cast<T>(alpha_), rate = static_cast<T>(r);
    const bool nesterov = nesterov_;
    const T *x = in<T>(ctx, 0, k), *g = in<T>(ctx, 1, k), *v = in<T>(ctx, 2, k);
    T *x_out = out<T>(ctx, 0, k), *v_out = out<T>(ctx, 1, k);
    parallel_for(size(ctx, k), optim::kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const T xi = x[i];
        const T g_reg = nc * xi + g[i];
        const T vi = alpha * v[i] + beta * g_reg;
        x_out[i] = xi - rate * (nesterov ? g_reg + alpha * vi : vi);
        v_out[i] = vi;
      }
    });
  }

 private:
  double alpha_, beta_, norm_;
  bool nesterov_ = false;
};

// Adagrad: inputs X..., G..., H...; outputs X_new..., H_new....
class Adagrad final : public PreviewOptimizer<Adagrad> {
 public:
  explicit Adagrad(const Node& n)
      : PreviewOptimizer<Adagrad>(n, "Adagrad", {"X", "G", "H"}, 2),
        decay_(optim::decimal_attr(n, "decay_factor", 0.f)),
        eps_(optim::decimal_attr(n, "epsilon", 1e-6f)),
        norm_(optim::decimal_attr(n, "norm_coefficient", 0.f)) {}

  template <class T>
  void run(ComputeContext& ctx, size_t k, double r, int64_t t) {
    const T rate = static_cast<T>(r / (1 + static_cast<double>(t) * decay_));  // decayed learning rate
    const T nc = static_cast<T>(norm_), eps = static_cast<T>(eps_);
    const T *x = in<T>(ctx, 0, k), *g = in<T>(ctx, 1, k), *h = in<T>(ctx, 2, k);
    T *x_out = out<T>(ctx, 0, k), *h_out = out<T>(ctx, 1, k);
    parallel_for(size(ctx, k), optim::kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const T xi = x[i];
        const T g_reg = nc * xi + g[i];
        const T hi = h[i] + g_reg * g_reg;
        x_out[i] = xi - rate * g_reg / (std::sqrt(hi) + eps);
        h_out[i] = hi;
      }
    });
  }

 private:
  double decay_, eps_, norm_;
};

const std::vector<DType> kFloatTypes = {DType::Float32, DType::Float64};

const KernelRegistrar adam_reg({kTrainingDomain, "Adam", 1, kMaxOpset, kFloatTypes, 2},
                               [](const Node& n) { return std::make_unique<Adam>(n); });
const KernelRegistrar momentum_reg({kTrainingDomain, "Momentum", 1, kMaxOpset, kFloatTypes, 2},
                                   [](const Node& n) { return std::make_unique<Momentum>(n); });
const KernelRegistrar adagrad_reg({kTrainingDomain, "Adagrad", 1, kMaxOpset, kFloatTypes, 2},
                                  [](const Node& n) { return std::make_unique<Adagrad>(n); });

}  // namespace
}  // namespace kiln

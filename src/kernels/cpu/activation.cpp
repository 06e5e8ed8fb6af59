// Activations: Relu, LeakyRelu, Sigmoid, Tanh, Elu, Selu, Softplus, HardSigmoid, HardSwish, Clip,
// PRelu, Celu, Softsign, ThresholdedRelu, Shrink, Mish, Gelu (gelu_common.h). Float32 runs on oneDNN's eltwise
// primitive where its algorithm is the ONNX formula, NaN handling included, and its accuracy is within 1e-6 relative
// (activation_test checks each against double); other dtypes, and ops where oneDNN falls short (said at each), are
// plain vectorised loops.
#include <cmath>
#include <limits>

#include "kernels/cpu/elementwise_common.h"
#include "kernels/cpu/gelu_common.h"

namespace kiln {

namespace {

// Plain C++: oneDNN's relu (alpha 0, even -0) maps NaN to 0 where ONNX (max(0, x)) keeps NaN. The
// loop compiles to maxps and is bound by memory bandwidth like oneDNN's.
struct ReluOp {
  using Types = SignedFloatIntTypes;
  explicit ReluOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    return x < T(0) ? T(0) : x;
  }  // NaN stays NaN
};

struct LeakyReluOp {
  using Types = FloatTypes;
  float alpha;
  explicit LeakyReluOp(const Node& n) : alpha(n.attr_float("alpha", 0.01f)) {}
  template <class T>
  T operator()(T x) const {
    return x < T(0) ? static_cast<T>(alpha) * x : x;
  }
  std::optional<DnnlAlgo> dnnl() const { return DnnlAlgo{dnnl::algorithm::eltwise_relu, alpha, 0.f}; }
};

struct SigmoidOp {
  using Types = FloatTypes;
  explicit SigmoidOp(const Node&) {}
  // Two branches so that exp never overflows and tiny results keep their precision.
  template <class T>
  T operator()(T x) const {
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    const T e = std::exp(x);
    return e / (T(1) + e);
  }
  std::optional<DnnlAlgo> dnnl() const { return DnnlAlgo{dnnl::algorithm::eltwise_logistic}; }
};

struct TanhOp {
  using Types = FloatTypes;
  explicit TanhOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    return std::tanh(x);
  }
  std::optional<DnnlAlgo> dnnl() const { return DnnlAlgo{dnnl::algorithm::eltwise_tanh}; }
};

// Plain C++: oneDNN's elu computes exp(x) - 1, which cancels near 0 (2e-6 relative error at
// x = -0.0125); expm1 keeps full precision.
struct EluOp {
  using Types = FloatTypes;
  float alpha;
  explicit EluOp(const Node& n) : alpha(n.attr_float("alpha", 1.0f)) {}
  template <class T>
  T operator()(T x) const {
    return x > T(0) ? x : static_cast<T>(alpha) * std::expm1(x);
  }
};

// Plain C++: oneDNN 2.6 has no selu (it would take elu plus a scaling post-op for one multiply).
struct SeluOp {
  using Types = FloatTypes;
  float alpha, gamma;
  explicit SeluOp(const Node& n)
      : alpha(n.attr_float("alpha", 1.67326319217681884765625f)),
        gamma(n.attr_float("gamma", 1.05070102214813232421875f)) {}
  template <class T>
  T operator()(T x) const {
    return static_cast<T>(gamma) * (x > T(0) ? x : static_cast<T>(alpha) * std::expm1(x));
  }
};

// Plain C++: oneDNN 2.6's soft_relu is wrong for large negative x (7.6e-6 at x = -87, where
// log(1 + e^x) is 2e-38).
struct SoftplusOp {
  using Types = FloatTypes;
  explicit SoftplusOp(const Node&) {}
  // log(1 + e^x) without overflow for large x.
  template <class T>
  T operator()(T x) const {
    return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  }
};

// Plain C++: oneDNN 2.6 has no hardsigmoid (added in 3.0); the loop vectorises.
struct HardSigmoidOp {
  using Types = FloatTypes;
  float alpha, beta;
  explicit HardSigmoidOp(const Node& n) : alpha(n.attr_float("alpha", 0.2f)), beta(n.attr_float("beta", 0.5f)) {}
  template <class T>
  T operator()(T x) const {
    return std::min(std::max(static_cast<T>(alpha) * x + static_cast<T>(beta), T(0)), T(1));  // NaN stays
  }
};

struct HardSwishOp {
  using Types = FloatTypes;
  explicit HardSwishOp(const Node&) {}
  // ONNX: x * max(0, min(1, x/6 + 1/2)), which is oneDNN's hardswish x * relu6(x + 3) / 6.
  template <class T>
  T operator()(T x) const {
    return x * std::min(std::max(x * static_cast<T>(1.0 / 6.0) + T(0.5), T(0)), T(1));
  }
  std::optional<DnnlAlgo> dnnl() const { return DnnlAlgo{dnnl::algorithm::eltwise_hardswish}; }
};

// ---- Clip: bounds are attributes up to opset 10 and optional scalar inputs from opset 11 -----------
// Plain C++: oneDNN's clip_v2 does not keep NaN inputs NaN (ONNX's clip does) and has no meaning
// for min > max; the min/max loop vectorises and is bound by memory bandwidth anyway.

class ClipKernel final : public Kernel {
 public:
  ClipKernel(const Node& n, bool bounds_are_inputs) : Kernel(n), inputs_(bounds_are_inputs) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    for (size_t i = 1; i <= 2 && inputs_; ++i) {
      if (!ctx.has_input(i)) continue;
      const char* what = i == 1 ? "min" : "max";
      if (numel(ctx.shape(i)) != 1)
        throw ShapeError(
            fmt::format("{} '{}' must be a scalar, got shape {}", what, node_.inputs[i], to_string(ctx.shape(i))));
      if (ctx.dtype(i) != ctx.dtype(0))
        throw TypeError(fmt::format("{} '{}' is {} but the input is {}", what, node_.inputs[i],
                                    dtype_name(ctx.dtype(i)), dtype_name(ctx.dtype(0))));
    }
    return {TensorMeta{ctx.dtype(0), ctx.shape(0), false, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    dispatch(NumericTypes{}, x.dtype(), fmt::format("input '{}'", node_.inputs.at(0)), [&](auto tag) {
      using T = decltype(tag);
      using C = compute_t<T>;
      C lo = std::numeric_limits<C>::lowest(), hi = std::numeric_limits<C>::max();
      if (!inputs_) {
        if constexpr (std::is_floating_point_v<C>) {
          if (node_.has_attr("min")) lo = static_cast<C>(node_.attr_float("min"));
          if (node_.has_attr("max")) hi = static_cast<C>(node_.attr_float("max"));
        }
      } else {
        if (ctx.has_input(1)) lo = load(ctx.input(1).data<T>()[0]);
        if (ctx.has_input(2)) hi = load(ctx.input(2).data<T>()[0]);
      }
      // max first then min: NaN inputs stay NaN, and min > max yields max, as ONNX specifies.
      map_unary(x.data<T>(), y.data<T>(), x.numel(),
                [lo, hi](T v) { return store<T>(std::min(std::max(load(v), lo), hi)); });
    });
  }

  std::optional<size_t> inplace_input() const override { return 0; }

 private:
  bool inputs_;
};

// ---- PRelu: slope broadcasts to the input's shape (unidirectionally) -------------------------------

using PReluTypes = TypeList<float, double, Half, BFloat16, int32_t, int64_t, uint32_t, uint64_t>;

class PReluKernel final : public Kernel {
 public:
  using Kernel::Kernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (ctx.dtype(1) != ctx.dtype(0))
      throw TypeError(fmt::format("slope '{}' is {} but X is {}", node_.inputs[1], dtype_name(ctx.dtype(1)),
                                  dtype_name(ctx.dtype(0))));
    const Shape out = broadcast_inputs(ctx, 2);
    if (out != ctx.shape(0))
      throw ShapeError(fmt::format("slope '{}' of shape {} does not broadcast to X's shape {} (it would make {})",
                                   node_.inputs[1], to_string(ctx.shape(1)), to_string(ctx.shape(0)), to_string(out)));
    return {TensorMeta{ctx.dtype(0), out, false, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& slope = ctx.input(1);
    const BroadcastPlan<2> plan = make_broadcast_plan<2>({x.shape(), slope.shape()});
    dispatch(PReluTypes{}, x.dtype(), fmt::format("input '{}'", node_.inputs.at(0)), [&](auto tag) {
      using T = decltype(tag);
      broadcast_binary(plan, x.data<T>(), slope.data<T>(), ctx.output(0).data<T>(), [](T xv, T sv) {
        const auto v = load(xv);
        if constexpr (std::is_unsigned_v<T>) return xv;
        else return v < 0 ? store<T>(wrap_mul(load(sv), v)) : xv;
      });
    });
  }

  std::optional<size_t> inplace_input() const override { return 0; }
};

// ---- Celu, Softsign, ThresholdedRelu, Shrink, Mish, Gelu: plain loops (oneDNN 2.6 has none of the
// first five; its gelu kernels approximate erf and tanh more loosely than libm) ---------------------

// max(0, x) + min(0, alpha * (exp(x / alpha) - 1)); expm1 keeps precision near 0.
struct CeluOp {
  using Types = TypeList<float, double>;  // the spec's only type, and double for gradient checks
  float alpha;
  explicit CeluOp(const Node& n) : alpha(n.attr_float("alpha", 1.0f)) {
    if (alpha == 0.f) throw InvalidModel("attribute alpha is 0; Celu divides by it");
  }
  template <class T>
  T operator()(T x) const {
    return x > T(0) ? x : static_cast<T>(alpha) * std::expm1(x / static_cast<T>(alpha));
  }
};

struct SoftsignOp {
  using Types = FloatTypes;
  explicit SoftsignOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    return x / (T(1) + std::fabs(x));
  }
};

struct ThresholdedReluOp {
  using Types = FloatTypes;
  float alpha;
  explicit ThresholdedReluOp(const Node& n) : alpha(n.attr_float("alpha", 1.0f)) {}
  template <class T>
  T operator()(T x) const {
    return x > static_cast<T>(alpha) ? x : (x != x ? x : T(0));
  }
};

// x + bias below -lambd, x - bias above lambd, 0 between — and for NaN, which is neither below nor
// above (ONNX's reference and ONNX Runtime agree). Integers compute in double and convert back like
// the reference's astype.
struct ShrinkOp {
  using Types = NumericTypes;
  float lambd, bias;
  explicit ShrinkOp(const Node& n) : lambd(n.attr_float("lambd", 0.5f)), bias(n.attr_float("bias", 0.0f)) {}
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      const T l = static_cast<T>(lambd), b = static_cast<T>(bias);
      return x < -l ? x + b : (x > l ? x - b : T(0));
    } else {
      const double v = static_cast<double>(x);
      return float_to_int<T>(v < -double(lambd) ? v + double(bias) : (v > double(lambd) ? v - double(bias) : 0.0));
    }
  }
};

// x * tanh(softplus(x)), softplus computed without overflow.
struct MishOp {
  using Types = FloatTypes;
  explicit MishOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    const T sp = std::log1p(std::exp(-std::fabs(x))) + std::max(x, T(0));
    return x * std::tanh(sp);
  }
};

template <bool BoundsAreInputs, class Types>
KernelRegistrar register_clip(int64_t since, int64_t end) {
  return KernelRegistrar({"", "Clip", since, end, Types::dtypes(), 0, {}},
                         [](const Node& n) { return std::make_unique<ClipKernel>(n, BoundsAreInputs); });
}

// Versions after the first of each op only widened the dtypes, which every version accepts here.
const KernelRegistrar kRegistrars[] = {
    register_unary<ReluOp>("Relu", 6),
    register_unary<LeakyReluOp>("LeakyRelu", 6),
    register_unary<SigmoidOp>("Sigmoid", 6),
    register_unary<TanhOp>("Tanh", 6),
    register_unary<EluOp>("Elu", 6),
    register_unary<SeluOp>("Selu", 6),
    register_unary<SoftplusOp>("Softplus", 1),
    register_unary<HardSigmoidOp>("HardSigmoid", 6),
    register_unary<HardSwishOp>("HardSwish", 14),
    register_clip<false, FloatTypes>(6, 10),
    register_clip<true, NumericTypes>(11, kMaxOpset),
    register_kernel<PReluKernel, PReluTypes>("PRelu", 7),
    register_unary<CeluOp>("Celu", 12),
    register_unary<SoftsignOp>("Softsign", 1),
    register_unary<ThresholdedReluOp>("ThresholdedRelu", 10),
    register_unary<ShrinkOp>("Shrink", 9),
    register_unary<MishOp>("Mish", 18),
    // Gelu is ONNX opset 20, after Kiln's opsets; PyTorch >= 2 exports it at lower ones.
    register_unary<gelu::GeluOp>("Gelu", 1),
};

}  // namespace

}  // namespace kiln

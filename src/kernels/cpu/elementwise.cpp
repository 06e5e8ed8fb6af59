// Elementwise math: binary Add, Sub, Mul, Div, Pow with numpy broadcasting, and the unary math ops
// Neg, Abs, Sqrt, Exp, Log, Reciprocal, Floor, Ceil, Erf. Activations live in activation.cpp.
#include <atomic>
#include <cmath>

#include "kernels/cpu/elementwise_common.h"

namespace kiln {

namespace {

std::string input_label(const Node& node, size_t i) {
  return i < node.inputs.size() && !node.inputs[i].empty() ? fmt::format("'{}'", node.inputs[i])
                                                           : fmt::format("#{}", i);
}

}  // namespace

Shape broadcast_inputs(const InferContext& ctx, size_t n) {
  Shape out = ctx.shape(0);
  for (size_t i = 1; i < n; ++i) {
    try {
      out = broadcast_shapes(out, ctx.shape(i));
    } catch (const ShapeError& e) {
      std::vector<std::string> named;
      for (size_t j = 0; j <= i; ++j)
        named.push_back(fmt::format("{} {}", input_label(ctx.node, j), to_string(ctx.shape(j))));
      throw ShapeError(fmt::format("inputs {}: {}", fmt::join(named, ", "), e.what()));
    }
  }
  return out;
}

namespace {

// ---- binary arithmetic ----------------------------------------------------------------------------

struct AddOp {
  template <class T> static T apply(T a, T b) { return wrap_add(a, b); }
};
struct SubOp {
  template <class T> static T apply(T a, T b) { return wrap_sub(a, b); }
};
struct MulOp {
  template <class T> static T apply(T a, T b) { return wrap_mul(a, b); }
};
struct DivOp {
  // Integers truncate toward zero as in C (ONNX's reference and ONNX Runtime agree). x / -1 is
  // a negation so that INT_MIN / -1 wraps like numpy instead of trapping.
  template <class T> static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) return b == T(-1) ? wrap_neg(a) : static_cast<T>(a / b);
    else return a / b;
  }
};

// Integer division by zero raises SIGFPE; refuse it up front, naming the divisor and the element.
template <class T>
void check_divisor(const Tensor& divisor, const Node& node) {
  if constexpr (std::is_integral_v<T>) {
    const T* d = divisor.data<T>();
    std::atomic<int64_t> first_zero{divisor.numel()};
    parallel_for(divisor.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        if (d[i] == T(0)) {
          int64_t cur = first_zero.load();
          while (i < cur && !first_zero.compare_exchange_weak(cur, i)) {}
          return;
        }
    });
    if (first_zero.load() < divisor.numel())
      throw InvalidArgument(fmt::format("integer division by zero: divisor {} ({}) is 0 at element {}",
                                        input_label(node, 1), divisor.describe(), first_zero.load()));
  }
}

// Broadcasting binary kernel whose inputs and output share one dtype.
template <class Op, class Types>
class BinaryKernel final : public Kernel {
 public:
  using Kernel::Kernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (ctx.dtype(0) != ctx.dtype(1))
      throw TypeError(fmt::format("inputs {} ({}) and {} ({}) must have the same dtype", input_label(node_, 0),
                                  dtype_name(ctx.dtype(0)), input_label(node_, 1), dtype_name(ctx.dtype(1))));
    const Shape out = broadcast_inputs(ctx, 2);
    inplace_.reset();
    if (ctx.shape(0) == out) inplace_ = 0;
    else if (ctx.shape(1) == out) inplace_ = 1;
    return {TensorMeta{ctx.dtype(0), out, false, Tensor()}};
  }

  void prepare(const InferContext& ctx, const std::vector<TensorMeta>&) override {
    plan_ = make_broadcast_plan<2>({ctx.shape(0), ctx.shape(1)});
    shapes_ = {ctx.shape(0), ctx.shape(1)};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (shapes_[0] != a.shape() || shapes_[1] != b.shape()) {  // not prepared for these shapes
      plan_ = make_broadcast_plan<2>({a.shape(), b.shape()});
      shapes_ = {a.shape(), b.shape()};
    }
    dispatch(Types{}, a.dtype(), fmt::format("input {}", input_label(node_, 0)), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<Op, DivOp>) check_divisor<T>(b, node_);
      broadcast_binary(plan_, a.data<T>(), b.data<T>(), ctx.output(0).data<T>(),
                       [](T x, T y) { return store<T>(Op::apply(load(x), load(y))); });
    });
  }

  std::optional<size_t> inplace_input() const override { return inplace_; }

 private:
  BroadcastPlan<2> plan_;
  std::array<Shape, 2> shapes_{Shape{-1}, Shape{-1}};
  std::optional<size_t> inplace_;
};

// ---- Pow: the exponent may have another dtype than the base; the output has the base's ----------

using PowBaseTypes = TypeList<float, double, Half, BFloat16, int32_t, int64_t>;

// Integer power by squaring with numpy's wrap-around. Negative exponents truncate 1/x^|e| toward
// zero (as ONNX Runtime's pow-then-cast does); 0 to a negative power has no value and sets `bad`.
template <class B, class E>
B int_pow(B base, E exp, std::atomic<bool>& bad) {
  if constexpr (std::is_signed_v<E>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp & 1) ? B(-1) : B(1);
      if (base == 0) bad.store(true, std::memory_order_relaxed);
      return 0;
    }
  }
  B result = 1;
  uint64_t e = static_cast<uint64_t>(exp);
  while (e != 0) {
    if (e & 1) result = wrap_mul(result, base);
    base = wrap_mul(base, base);
    e >>= 1;
  }
  return result;
}

class PowKernel final : public Kernel {
 public:
  using Kernel::Kernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape out = broadcast_inputs(ctx, 2);
    inplace_.reset();
    if (ctx.shape(0) == out) inplace_ = 0;
    else if (ctx.shape(1) == out && ctx.dtype(1) == ctx.dtype(0)) inplace_ = 1;
    return {TensorMeta{ctx.dtype(0), out, false, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    const BroadcastPlan<2> plan = make_broadcast_plan<2>({a.shape(), b.shape()});
    std::atomic<bool> bad{false};
    dispatch(PowBaseTypes{}, a.dtype(), fmt::format("base {}", input_label(node_, 0)), [&](auto btag) {
      using TB = decltype(btag);
      dispatch(NumericTypes{}, b.dtype(), fmt::format("exponent {}", input_label(node_, 1)), [&](auto etag) {
        using TE = decltype(etag);
        run<TB, TE>(plan, a, b, ctx.output(0), bad);
      });
    });
    if (bad.load())
      throw InvalidArgument(fmt::format("integer Pow: base {} has 0 raised to a negative exponent from {}",
                                        input_label(node_, 0), input_label(node_, 1)));
  }

  std::optional<size_t> inplace_input() const override { return inplace_; }

 private:
  template <class TB, class TE>
  static void run(const BroadcastPlan<2>& plan, const Tensor& a, const Tensor& b, Tensor& y, std::atomic<bool>& bad) {
    using CB = compute_t<TB>;
    const TB* pa = a.data<TB>();
    const TE* pb = b.data<TE>();
    TB* py = y.data<TB>();
    if constexpr (std::is_floating_point_v<CB>) {
      // x^2 is the common case (norms, variances): x*x is exactly pow's correctly rounded result.
      if (b.numel() == 1 && static_cast<double>(load(pb[0])) == 2.0) {
        broadcast_binary(plan, pa, pb, py, [](TB x, TE) { const CB v = load(x); return store<TB>(v * v); });
        return;
      }
      // In double, so float results are the correctly rounded float of the exact power.
      broadcast_binary(plan, pa, pb, py, [](TB x, TE e) {
        return store<TB>(static_cast<CB>(std::pow(static_cast<double>(load(x)), static_cast<double>(load(e)))));
      });
    } else if constexpr (std::is_floating_point_v<compute_t<TE>>) {
      broadcast_binary(plan, pa, pb, py, [](TB x, TE e) {
        return float_to_int<TB>(std::pow(static_cast<double>(x), static_cast<double>(load(e))));
      });
    } else {
      broadcast_binary(plan, pa, pb, py, [&bad](TB x, TE e) { return int_pow<TB, TE>(x, e, bad); });
    }
  }

  std::optional<size_t> inplace_;
};

// ---- unary math -------------------------------------------------------------------------------------

struct NegOp {
  using Types = SignedFloatIntTypes;
  explicit NegOp(const Node&) {}
  template <class T> T operator()(T x) const { return wrap_neg(x); }
};

struct AbsOp {
  using Types = NumericTypes;
  explicit AbsOp(const Node&) {}
  template <class T> T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else if constexpr (std::is_integral_v<T>) return x < 0 ? wrap_neg(x) : x;  // |INT_MIN| wraps, as numpy
    else return std::fabs(x);
  }
  std::optional<DnnlAlgo> dnnl() const { return DnnlAlgo{dnnl::algorithm::eltwise_abs}; }
};

struct SqrtOp {
  using Types = FloatTypes;
  explicit SqrtOp(const Node&) {}
  template <class T> T operator()(T x) const { return std::sqrt(x); }
  std::optional<DnnlAlgo> dnnl() const { return DnnlAlgo{dnnl::algorithm::eltwise_sqrt}; }
};

struct ExpOp {
  using Types = FloatTypes;
  explicit ExpOp(const Node&) {}
  template <class T> T operator()(T x) const { return std::exp(x); }
  std::optional<DnnlAlgo> dnnl() const { return DnnlAlgo{dnnl::algorithm::eltwise_exp}; }
};

// Plain C++: oneDNN 2.6's log is off by up to 1.7e-6 relative (x = 0.614); std::log is within an ulp.
struct LogOp {
  using Types = FloatTypes;
  explicit LogOp(const Node&) {}
  template <class T> T operator()(T x) const { return std::log(x); }
};

// Plain C++: oneDNN's eltwise_pow with beta -1 goes through exp/log approximations, 1/x is exact.
struct ReciprocalOp {
  using Types = FloatTypes;
  explicit ReciprocalOp(const Node&) {}
  template <class T> T operator()(T x) const { return T(1) / x; }
};

// Plain C++: oneDNN has only round-half-to-even, no floor or ceil.
struct FloorOp {
  using Types = FloatTypes;
  explicit FloorOp(const Node&) {}
  template <class T> T operator()(T x) const { return std::floor(x); }
};

struct CeilOp {
  using Types = FloatTypes;
  explicit CeilOp(const Node&) {}
  template <class T> T operator()(T x) const { return std::ceil(x); }
};

// Plain C++: oneDNN has erf only inside gelu_erf.
struct ErfOp {
  using Types = FloatTypes;
  explicit ErfOp(const Node&) {}
  template <class T> T operator()(T x) const { return std::erf(x); }
};

// Opset 7 introduced numpy broadcasting; the semantics are unchanged since (later versions only
// add dtypes, which are registered here for every version).
const KernelRegistrar kRegistrars[] = {
    register_kernel<BinaryKernel<AddOp, NumericTypes>, NumericTypes>("Add", 7),
    register_kernel<BinaryKernel<SubOp, NumericTypes>, NumericTypes>("Sub", 7),
    register_kernel<BinaryKernel<MulOp, NumericTypes>, NumericTypes>("Mul", 7),
    register_kernel<BinaryKernel<DivOp, NumericTypes>, NumericTypes>("Div", 7),
    register_kernel<PowKernel, PowBaseTypes>("Pow", 7),
    register_unary<NegOp>("Neg", 6),
    register_unary<AbsOp>("Abs", 6),
    register_unary<SqrtOp>("Sqrt", 6),
    register_unary<ExpOp>("Exp", 6),
    register_unary<LogOp>("Log", 6),
    register_unary<ReciprocalOp>("Reciprocal", 6),
    register_unary<FloorOp>("Floor", 6),
    register_unary<CeilOp>("Ceil", 6),
    register_unary<ErfOp>("Erf", 9),
};

}  // namespace

}  // namespace kiln

// Elementwise math: binary Add, Sub, Mul, Div, Pow, Mod with numpy broadcasting, and the unary math
// ops Neg, Abs, Sqrt, Exp, Log, Reciprocal, Floor, Ceil, Erf, Sign, Round; BitShift.  Activations live in
// activation.cpp, trigonometry in trig.cpp, comparisons in compare.cpp, logic in logic.cpp.
#include <atomic>
#include <cmath>

#include "kernels/cpu/elementwise_common.h"
#include "kernels/cpu/vector_math.h"

namespace kiln {

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
  template <class T>
  static T apply(T a, T b) {
    return wrap_add(a, b);
  }
};
struct SubOp {
  template <class T>
  static T apply(T a, T b) {
    return wrap_sub(a, b);
  }
};
struct MulOp {
  template <class T>
  static T apply(T a, T b) {
    return wrap_mul(a, b);
  }
};
struct DivOp {
  // Integers truncate toward zero as in C (ONNX's reference and ONNX Runtime agree). x / -1 is
  // a negation so that INT_MIN / -1 wraps like numpy instead of trapping.
  template <class T>
  static T apply(T a, T b) {
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
          while (i < cur && !first_zero.compare_exchange_weak(cur, i)) {
          }
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
    check_same_dtype(node_, ctx);
    const Shape out = broadcast_inputs(ctx, 2);
    inplace_ = same_as_output(ctx, 2, ctx.dtype(0), out);
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
    inplace_ = same_as_output(ctx, 2, ctx.dtype(0), out);
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
        broadcast_binary(plan, pa, pb, py, [](TB x, TE) {
          const CB v = load(x);
          return store<TB>(v * v);
        });
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

// ---- Mod: fmod=0 is Python's % on integers (sign of the divisor), fmod=1 is C's fmod (sign of the
// dividend); floats only have the latter, so the spec requires fmod=1 for them -----------------------

template <class T>
T int_mod(T a, T b, bool c_fmod) {
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return 0;  // INT_MIN % -1 traps in C; the result is 0 either way
    const T r = static_cast<T>(a % b);
    if (!c_fmod && r != 0 && ((r < 0) != (b < 0))) return static_cast<T>(r + b);
    return r;
  } else {
    (void)c_fmod;
    return static_cast<T>(a % b);
  }
}

class ModKernel final : public Kernel {
 public:
  explicit ModKernel(const Node& n) : Kernel(n), fmod_(n.attr_int("fmod", 0)) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (fmod_ != 0 && fmod_ != 1) throw InvalidModel(fmt::format("attribute fmod is {}; it must be 0 or 1", fmod_));
    check_same_dtype(node_, ctx);
    if (is_floating(ctx.dtype(0)) && fmod_ == 0)
      throw InvalidModel(
          fmt::format("fmod=0 (integer remainder) given for {} inputs {} and {}; floating-point Mod "
                      "needs fmod=1",
                      dtype_name(ctx.dtype(0)), input_label(node_, 0), input_label(node_, 1)));
    const Shape out = broadcast_inputs(ctx, 2);
    inplace_ = same_as_output(ctx, 2, ctx.dtype(0), out);
    return {TensorMeta{ctx.dtype(0), out, false, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    const BroadcastPlan<2> plan = make_broadcast_plan<2>({a.shape(), b.shape()});
    const bool c_fmod = fmod_ == 1;
    dispatch(NumericTypes{}, a.dtype(), fmt::format("input {}", input_label(node_, 0)), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T>) {
        check_divisor<T>(b, node_);
        broadcast_binary(plan, a.data<T>(), b.data<T>(), ctx.output(0).data<T>(),
                         [c_fmod](T x, T y) { return int_mod(x, y, c_fmod); });
      } else {
        broadcast_binary(plan, a.data<T>(), b.data<T>(), ctx.output(0).data<T>(),
                         [](T x, T y) { return store<T>(std::fmod(load(x), load(y))); });
      }
    });
  }

  std::optional<size_t> inplace_input() const override { return inplace_; }

 private:
  int64_t fmod_;
  std::optional<size_t> inplace_;
};

// ---- BitShift on unsigned integers; shifting by the bit width or more gives 0 (numpy), not UB -----

using UnsignedTypes = TypeList<uint8_t, uint16_t, uint32_t, uint64_t>;

class BitShiftKernel final : public Kernel {
 public:
  explicit BitShiftKernel(const Node& n) : Kernel(n), direction_(n.attr_string("direction", "")) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (direction_ != "LEFT" && direction_ != "RIGHT")
      throw InvalidModel(fmt::format("attribute direction is '{}'; it must be \"LEFT\" or \"RIGHT\"", direction_));
    check_same_dtype(node_, ctx);
    const Shape out = broadcast_inputs(ctx, 2);
    inplace_ = same_as_output(ctx, 2, ctx.dtype(0), out);
    return {TensorMeta{ctx.dtype(0), out, false, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    const BroadcastPlan<2> plan = make_broadcast_plan<2>({a.shape(), b.shape()});
    const bool left = direction_ == "LEFT";
    dispatch(UnsignedTypes{}, a.dtype(), fmt::format("input {}", input_label(node_, 0)), [&](auto tag) {
      using T = decltype(tag);
      constexpr T bits = sizeof(T) * 8;
      broadcast_binary(plan, a.data<T>(), b.data<T>(), ctx.output(0).data<T>(), [left](T x, T s) -> T {
        if (s >= bits) return 0;
        return left ? static_cast<T>(x << s) : static_cast<T>(x >> s);
      });
    });
  }

  std::optional<size_t> inplace_input() const override { return inplace_; }

 private:
  std::string direction_;
  std::optional<size_t> inplace_;
};

// ---- unary math -------------------------------------------------------------------------------------

struct NegOp {
  using Types = SignedFloatIntTypes;
  explicit NegOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    return wrap_neg(x);
  }
};

struct AbsOp {
  using Types = NumericTypes;
  explicit AbsOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else if constexpr (std::is_integral_v<T>) return x < 0 ? wrap_neg(x) : x;  // |INT_MIN| wraps, as numpy
    else return std::fabs(x);
  }
  std::optional<DnnlAlgo> dnnl() const { return DnnlAlgo{dnnl::algorithm::eltwise_abs}; }
};

struct SqrtOp {
  using Types = FloatTypes;
  explicit SqrtOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    return std::sqrt(x);
  }
  std::optional<DnnlAlgo> dnnl() const { return DnnlAlgo{dnnl::algorithm::eltwise_sqrt}; }
};

struct ExpOp {
  using Types = FloatTypes;
  explicit ExpOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    return std::exp(x);
  }
  std::optional<DnnlAlgo> dnnl() const { return DnnlAlgo{dnnl::algorithm::eltwise_exp}; }
};

// Plain C++: oneDNN 2.6's log is off by up to 1.7e-6 relative (x = 0.614); std::log is within an ulp.
struct LogOp {
  using Types = FloatTypes;
  explicit LogOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    return std::log(x);
  }
};

// Plain C++: oneDNN's eltwise_pow with beta -1 goes through exp/log approximations, 1/x is exact.
struct ReciprocalOp {
  using Types = FloatTypes;
  explicit ReciprocalOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    return T(1) / x;
  }
};

// Plain C++: oneDNN has only round-half-to-even, no floor or ceil.
struct FloorOp {
  using Types = FloatTypes;
  explicit FloorOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    return std::floor(x);
  }
};

struct CeilOp {
  using Types = FloatTypes;
  explicit CeilOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    return std::ceil(x);
  }
};

// oneDNN has erf only inside gelu_erf. float32 runs at vector width (vector_math.h), rounded once
// from erf in double, as the other float types are here.
struct ErfOp {
  using Types = FloatTypes;
  explicit ErfOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_same_v<T, float>) return vmath::erf_one(x);
    else return std::erf(x);
  }
  static void run_float32(const float* x, float* y, int64_t n) { vmath::erf(x, y, n); }
};

// -1, 0 or 1 (NaN stays NaN, -0 gives 0 like numpy).
struct SignOp {
  using Types = NumericTypes;
  explicit SignOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x > T(0) ? T(1) : T(0);
    else if constexpr (std::is_integral_v<T>) return static_cast<T>((x > T(0)) - (x < T(0)));
    else return std::isnan(x) ? x : static_cast<T>((x > T(0)) - (x < T(0)));
  }
};

// Half to even, independent of the floating-point environment's rounding mode (which rint and
// nearbyint would follow). Zero results keep the input's sign (round(-0.4) = -0), as numpy.
struct RoundOp {
  using Types = FloatTypes;
  explicit RoundOp(const Node&) {}
  template <class T>
  T operator()(T x) const {
    const T f = std::floor(x);
    const T d = x - f;  // NaN for NaN and ±inf, which then pass through f + 1
    T r;
    if (d < T(0.5)) r = f;
    else if (d > T(0.5)) r = f + T(1);
    else r = std::fmod(f, T(2)) == T(0) ? f : f + T(1);
    if (std::isinf(x)) return x;
    return r == T(0) ? std::copysign(T(0), x) : r;
  }
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
    register_unary<SignOp>("Sign", 9),
    register_unary<RoundOp>("Round", 11),
    register_kernel<ModKernel, NumericTypes>("Mod", 10),
    register_kernel<BitShiftKernel, UnsignedTypes>("BitShift", 11),
};

}  // namespace

}  // namespace kiln

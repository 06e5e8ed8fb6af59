// The Reduce* family: Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare, over any set
// of axes, with keepdims and noop_with_empty_axes (which returns the input unchanged, as the spec
// says). Axes are an attribute up to ReduceSum-11 / the others' opset 13 and an optional input from
// ReduceSum-13 / the others' opset 18; as an input they must be known when planning (a constant),
// like every shape input. Each op is a small policy (identity, step, combine, finish) run by one
// reduction loop. An empty reduction gives the identity: 0 for sums, 1 for Prod, -inf (the lowest
// integer) for Max, +inf (the highest) for Min, -inf for LogSum and LogSumExp.
//
// The input is viewed as alternating groups of kept and reduced dimensions (size-1 dims dropped,
// neighbours with the same role merged). Each output element, or block of a trailing kept group,
// accumulates over the reduced groups: a contiguous run when the last group is reduced, a vector
// of the trailing kept group otherwise. Floats accumulate in double, integers in 64 bits with
// wrap-around (Max and Min in the element type, which is exact), so results do not depend on the
// thread count.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/elementwise_common.h"

namespace kiln {

namespace {

template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double,
                                 std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;

// ---- policies: Acc<T> the accumulator type, identity, step (one element), combine (two partial
// results), finish (accumulator to output element; `count` is the number of reduced elements) ---

template <class T>
double as_double(T v) {
  return static_cast<double>(load(v));
}

// Converts a double result to T: floats round, integers convert as numpy's astype does.
template <class T>
T from_result(double v) {
  if constexpr (std::is_floating_point_v<compute_t<T>>) return store<T>(static_cast<compute_t<T>>(v));
  else return float_to_int<T>(v);
}

template <class T, class A>
T narrow(A a) {
  if constexpr (std::is_floating_point_v<A>) return from_result<T>(a);
  else return static_cast<T>(a);  // integer sums wrap, as numpy's
}

template <class T>
compute_t<T> abs_of(T x) {
  const compute_t<T> v = load(x);
  if constexpr (std::is_unsigned_v<T>) return v;
  else if constexpr (std::is_integral_v<T>) return v < 0 ? wrap_neg(v) : v;
  else return std::fabs(v);
}

struct SumPolicy {
  template <class T>
  using Acc = acc_t<T>;
  template <class A>
  static A identity() {
    return A(0);
  }
  template <class A, class T>
  static A step(A a, T x) {
    return wrap_add(a, static_cast<A>(load(x)));
  }
  template <class A>
  static A combine(A a, A b) {
    return wrap_add(a, b);
  }
  template <class T, class A>
  static T finish(A a, int64_t) {
    return narrow<T>(a);
  }
};

struct MeanPolicy : SumPolicy {
  template <class T, class A>
  static T finish(A a, int64_t count) {
    if constexpr (std::is_floating_point_v<A>) return from_result<T>(a / static_cast<double>(count));
    else return static_cast<T>(a / static_cast<A>(count));  // count > 0: checked in infer
  }
};

struct ProdPolicy {
  template <class T>
  using Acc = acc_t<T>;
  template <class A>
  static A identity() {
    return A(1);
  }
  template <class A, class T>
  static A step(A a, T x) {
    return wrap_mul(a, static_cast<A>(load(x)));
  }
  template <class A>
  static A combine(A a, A b) {
    return wrap_mul(a, b);
  }
  template <class T, class A>
  static T finish(A a, int64_t) {
    return narrow<T>(a);
  }
};

struct SumSquarePolicy : SumPolicy {
  template <class A, class T>
  static A step(A a, T x) {
    const A v = static_cast<A>(load(x));
    return wrap_add(a, wrap_mul(v, v));
  }
};

struct L1Policy : SumPolicy {
  template <class A, class T>
  static A step(A a, T x) {
    return wrap_add(a, static_cast<A>(abs_of(x)));
  }
};

struct L2Policy : SumSquarePolicy {
  template <class T, class A>
  static T finish(A a, int64_t) {
    return from_result<T>(std::sqrt(static_cast<double>(a)));
  }
};

struct LogSumPolicy : SumPolicy {
  template <class T, class A>
  static T finish(A a, int64_t) {
    return from_result<T>(std::log(static_cast<double>(a)));
  }
};

// NaN wins, as numpy's maximum.reduce / minimum.reduce.
template <bool Max>
struct ExtremePolicy {
  template <class T>
  using Acc = compute_t<T>;
  template <class A>
  static A identity() {
    if constexpr (std::is_floating_point_v<A>)
      return Max ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
    else return Max ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max();
  }
  template <class A>
  static A combine(A a, A b) {
    if constexpr (std::is_floating_point_v<A>) {
      if (b != b) return b;
    }
    return (Max ? b > a : b < a) ? b : a;
  }
  template <class A, class T>
  static A step(A a, T x) {
    return combine(a, load(x));
  }
  template <class T, class A>
  static T finish(A a, int64_t) {
    return store<T>(a);
  }
};

// log(sum(exp(x))) in one pass: the running maximum m and the sum s of exp(x - m), rescaled when
// m grows, so nothing overflows. Equal values add 1 (which also keeps -inf and +inf out of inf-inf).
struct LseAcc {
  double m = -std::numeric_limits<double>::infinity();
  double s = 0.0;
};

struct LogSumExpPolicy {
  template <class T>
  using Acc = LseAcc;
  template <class A>
  static A identity() {
    return A{};
  }
  static LseAcc add(LseAcc a, double m, double s) {
    if (s == 0.0) return a;
    if (m == a.m) return {a.m, a.s + s};
    if (m < a.m) return {a.m, a.s + s * std::exp(m - a.m)};
    if (m > a.m) return {m, s + a.s * std::exp(a.m - m)};
    return {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};  // NaN
  }
  template <class A, class T>
  static A step(A a, T x) {
    return add(a, as_double(x), 1.0);
  }
  template <class A>
  static A combine(A a, A b) {
    return add(a, b.m, b.s);
  }
  template <class T, class A>
  static T finish(A a, int64_t) {
    return from_result<T>(a.m + std::log(a.s));
  }
};

// Reduction of n contiguous elements with eight independent partials (ILP, still deterministic).
template <class P, class T, class A>
A reduce_contiguous(const T* p, int64_t n) {
  A part[8];
  for (A& v : part) v = P::template identity<A>();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) part[k] = P::step(part[k], p[i + k]);
  for (; i < n; ++i) part[0] = P::step(part[0], p[i]);
  A s = part[0];
  for (int k = 1; k < 8; ++k) s = P::combine(s, part[k]);
  return s;
}

// The collapsed view: groups of dims, each reduced or kept, with contiguous input strides.
struct ReducePlan {
  std::vector<int64_t> outer_sizes, outer_strides;  // kept groups before the trailing one
  std::vector<int64_t> red_sizes, red_strides;      // reduced groups
  int64_t inner = 1;                                // trailing kept group (1 if the last is reduced)
  int64_t outer = 1;                                // product of outer_sizes
  int64_t reduced = 1;                              // elements summed per output element
};

ReducePlan make_reduce_plan(const Shape& shape, const std::vector<bool>& reduce) {
  std::vector<std::pair<int64_t, bool>> groups;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!groups.empty() && groups.back().second == reduce[i]) groups.back().first *= shape[i];
    else groups.emplace_back(shape[i], reduce[i]);
  }
  ReducePlan p;
  int64_t stride = 1;
  std::vector<int64_t> strides(groups.size());
  for (size_t g = groups.size(); g-- > 0;) {
    strides[g] = stride;
    stride *= groups[g].first;
  }
  size_t end = groups.size();
  if (!groups.empty() && !groups.back().second) {
    p.inner = groups.back().first;
    --end;
  }
  for (size_t g = 0; g < end; ++g) {
    if (groups[g].second) {
      p.red_sizes.push_back(groups[g].first);
      p.red_strides.push_back(strides[g]);
      p.reduced *= groups[g].first;
    } else {
      p.outer_sizes.push_back(groups[g].first);
      p.outer_strides.push_back(strides[g]);
      p.outer *= groups[g].first;
    }
  }
  return p;
}

template <class P, class T>
void reduce(const ReducePlan& p, const T* x, T* y, int64_t count) {
  using A = typename P::template Acc<T>;
  // A zero-size reduced group leaves nothing to read: the identity (and float means 0/0 = NaN).
  const bool empty = std::any_of(p.red_sizes.begin(), p.red_sizes.end(), [](int64_t s) { return s == 0; });
  constexpr int64_t kBlock = 1024;
  const int64_t blocks = (p.inner + kBlock - 1) / kBlock;
  const int64_t tasks = p.outer * blocks;
  const int64_t grain =
      std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, p.reduced * std::min(p.inner, kBlock)));
  const bool last_reduced = p.inner == 1 && !p.red_sizes.empty();
  const size_t nr = p.red_sizes.size();
  // Walking the reduced groups: with the last one contiguous (last_reduced) it is summed as a run.
  const size_t odo = last_reduced ? nr - 1 : nr;
  const int64_t run = last_reduced ? p.red_sizes.back() : 1;

  parallel_for(tasks, grain, [&](int64_t tb, int64_t te) {
    std::vector<int64_t> idx(nr);
    A acc[kBlock];
    for (int64_t t = tb; t < te; ++t) {
      const int64_t o = t / blocks;
      const int64_t j0 = (t % blocks) * kBlock;
      const int64_t jn = std::min(kBlock, p.inner - j0);
      int64_t base = 0;
      for (size_t k = p.outer_sizes.size(), rem = static_cast<size_t>(o); k-- > 0;) {
        base += static_cast<int64_t>(rem % static_cast<size_t>(p.outer_sizes[k])) * p.outer_strides[k];
        rem /= static_cast<size_t>(p.outer_sizes[k]);
      }
      std::fill(acc, acc + jn, P::template identity<A>());
      if (!empty) {
        std::fill(idx.begin(), idx.end(), 0);
        int64_t off = base + j0;
        while (true) {
          if (last_reduced) {
            acc[0] = P::combine(acc[0], reduce_contiguous<P, T, A>(x + off, run));
          } else {
            const T* px = x + off;
            for (int64_t j = 0; j < jn; ++j) acc[j] = P::step(acc[j], px[j]);
          }
          bool done = true;  // advance the odometer over reduced groups [0, odo)
          for (size_t k = odo; k-- > 0;) {
            off += p.red_strides[k];
            if (++idx[k] < p.red_sizes[k]) {
              done = false;
              break;
            }
            off -= p.red_strides[k] * p.red_sizes[k];
            idx[k] = 0;
          }
          if (done) break;
        }
      }
      T* py = y + o * p.inner + j0;
      for (int64_t j = 0; j < jn; ++j) py[j] = P::template finish<T>(acc[j], count);
    }
  });
}

// Float and the 32/64-bit integer types (the spec's list for most Reduce ops); Max and Min add the
// 8-bit integers from opset 12.
using ReduceTypes = TypeList<float, double, Half, BFloat16, int32_t, int64_t, uint32_t, uint64_t>;
using ExtremeTypes = TypeList<float, double, Half, BFloat16, int32_t, int64_t, uint32_t, uint64_t, int8_t, uint8_t>;

template <class P, class Types>
class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(const Node& n, bool axes_input) : Kernel(n), axes_input_(axes_input) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const int64_t rank = static_cast<int64_t>(in.size());
    const bool keepdims = node_.attr_int("keepdims", 1) != 0;
    std::vector<int64_t> axes;
    if (axes_input_) {
      if (ctx.has_input(1)) {
        if (ctx.dtype(1) != DType::Int64 || ctx.shape(1).size() != 1)
          throw TypeError(fmt::format("axes {} must be a 1-D int64 tensor, got {}{}", input_label(node_, 1),
                                      dtype_name(ctx.dtype(1)), to_string(ctx.shape(1))));
        axes = ctx.value(1).to_int64_vector();
      }
    } else {
      axes = node_.attr_ints("axes", {});
    }
    noop_ = axes.empty() && axes_input_ && node_.attr_int("noop_with_empty_axes", 0) != 0;
    reduce_.assign(in.size(), axes.empty() && !noop_);
    for (int64_t a : axes) {
      const size_t k = static_cast<size_t>(normalize_axis(a, rank, "axes entry"));
      if (rank == 0) continue;
      if (reduce_[k])
        throw InvalidModel(
            fmt::format("axes [{}] name axis {} twice (input shape {})", fmt::join(axes, ", "), k, to_string(in)));
      reduce_[k] = true;
    }
    Shape out;
    count_ = 1;
    for (size_t i = 0; i < in.size(); ++i) {
      if (!reduce_[i]) out.push_back(in[i]);
      else if (keepdims) out.push_back(1);
      if (reduce_[i]) count_ *= in[i];
    }
    if (std::is_same_v<P, MeanPolicy> && count_ == 0 && is_integer(ctx.dtype(0)) && numel(out) > 0)
      throw InvalidArgument(
          fmt::format("integer mean over zero elements: input '{}' has shape {} and the "
                      "reduced axes are empty",
                      node_.inputs.at(0), to_string(in)));
    return {TensorMeta{ctx.dtype(0), out, false, Tensor()}};
  }

  void prepare(const InferContext& ctx, const std::vector<TensorMeta>&) override {
    plan_ = make_reduce_plan(ctx.shape(0), reduce_);
    shape_ = ctx.shape(0);
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (noop_) {
      if (x.nbytes() > 0 && x.raw_data() != y.raw_data()) std::memcpy(y.raw_data(), x.raw_data(), x.nbytes());
      return;
    }
    if (x.shape() != shape_) {  // not prepared for this shape
      plan_ = make_reduce_plan(x.shape(), reduce_);
      shape_ = x.shape();
    }
    dispatch(Types{}, x.dtype(), fmt::format("input '{}'", node_.inputs.at(0)), [&](auto tag) {
      using T = decltype(tag);
      reduce<P, T>(plan_, x.data<T>(), y.data<T>(), count_);
    });
  }

 private:
  bool axes_input_;
  bool noop_ = false;
  std::vector<bool> reduce_;
  int64_t count_ = 1;
  ReducePlan plan_;
  Shape shape_{-1};
};

template <class P, class Types = ReduceTypes>
KernelRegistrar register_reduce(const char* op, int64_t since, int64_t end, bool axes_input) {
  return KernelRegistrar({"", op, since, end, Types::dtypes(), 0, {}}, [axes_input](const Node& n) {
    return std::make_unique<ReduceKernel<P, Types>>(n, axes_input);
  });
}

// Axes moved from attribute to input at ReduceSum-13 and at opset 18 for the others.
const KernelRegistrar kRegistrars[] = {
    register_reduce<SumPolicy>("ReduceSum", 1, 12, false),
    register_reduce<SumPolicy>("ReduceSum", 13, kMaxOpset, true),
    register_reduce<MeanPolicy>("ReduceMean", 1, 17, false),
    register_reduce<MeanPolicy>("ReduceMean", 18, kMaxOpset, true),
    register_reduce<ExtremePolicy<true>, ExtremeTypes>("ReduceMax", 1, 17, false),
    register_reduce<ExtremePolicy<true>, ExtremeTypes>("ReduceMax", 18, kMaxOpset, true),
    register_reduce<ExtremePolicy<false>, ExtremeTypes>("ReduceMin", 1, 17, false),
    register_reduce<ExtremePolicy<false>, ExtremeTypes>("ReduceMin", 18, kMaxOpset, true),
    register_reduce<ProdPolicy>("ReduceProd", 1, 17, false),
    register_reduce<ProdPolicy>("ReduceProd", 18, kMaxOpset, true),
    register_reduce<L1Policy>("ReduceL1", 1, 17, false),
    register_reduce<L1Policy>("ReduceL1", 18, kMaxOpset, true),
    register_reduce<L2Policy>("ReduceL2", 1, 17, false),
    register_reduce<L2Policy>("ReduceL2", 18, kMaxOpset, true),
    register_reduce<LogSumPolicy>("ReduceLogSum", 1, 17, false),
    register_reduce<LogSumPolicy>("ReduceLogSum", 18, kMaxOpset, true),
    register_reduce<LogSumExpPolicy>("ReduceLogSumExp", 1, 17, false),
    register_reduce<LogSumExpPolicy>("ReduceLogSumExp", 18, kMaxOpset, true),
    register_reduce<SumSquarePolicy>("ReduceSumSquare", 1, 17, false),
    register_reduce<SumSquarePolicy>("ReduceSumSquare", 18, kMaxOpset, true),
};

}  // namespace

}  // namespace kiln

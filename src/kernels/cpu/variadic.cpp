// Variadic elementwise ops over one or more inputs broadcast together: Min, Max (NaN propagates, as
// numpy's minimum/maximum), Sum and Mean. The output is folded input by input; 16-bit floats
// accumulate in a float buffer so a long Sum or Mean rounds once, not once per input.
#include <cmath>
#include <cstring>

#include "kernels/cpu/elementwise_common.h"

namespace kiln {

namespace {

struct MinOp {
  template <class C>
  static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>) return (a < b || a != a) ? a : b;  // a NaN wins; b NaN: b
    else return a < b ? a : b;
  }
};
struct MaxOp {
  template <class C>
  static C apply(C a, C b) {
    if constexpr (std::is_floating_point_v<C>) return (a > b || a != a) ? a : b;
    else return a > b ? a : b;
  }
};
struct SumOp {
  template <class C>
  static C apply(C a, C b) {
    return wrap_add(a, b);
  }
};

template <class Op, class Types, bool Mean = false>
class VariadicKernel final : public Kernel {
 public:
  using Kernel::Kernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (ctx.num_inputs() == 0) throw InvalidModel("needs at least one input, got none");
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i)) throw InvalidModel(fmt::format("input #{} is omitted; every input is required", i));
      if (ctx.dtype(i) != ctx.dtype(0))
        throw TypeError(fmt::format("input {} is {} but input {} is {}; all inputs must share one dtype",
                                    input_label(node_, i), dtype_name(ctx.dtype(i)), input_label(node_, 0),
                                    dtype_name(ctx.dtype(0))));
    }
    const Shape out = broadcast_inputs(ctx, ctx.num_inputs());
    inplace_.reset();
    for (size_t i = 0; i < ctx.num_inputs() && !inplace_; ++i)
      if (ctx.shape(i) == out) inplace_ = i;
    return {TensorMeta{ctx.dtype(0), out, false, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    Tensor& y = ctx.output(0);
    dispatch(Types{}, y.dtype(), fmt::format("input {}", input_label(node_, 0)), [&](auto tag) {
      using T = decltype(tag);
      run<T>(ctx, y);
    });
  }

  std::optional<size_t> inplace_input() const override { return inplace_; }

 private:
  template <class T>
  void run(ComputeContext& ctx, Tensor& y) {
    using C = compute_t<T>;
    const int64_t n = y.numel();
    // The accumulator: the output itself, or a float buffer for 16-bit floats.
    std::vector<C> buffer;
    C* acc;
    if constexpr (std::is_same_v<T, C>) {
      acc = y.data<T>();
    } else {
      buffer.resize(static_cast<size_t>(n));
      acc = buffer.data();
    }
    // If the output is planned over input k (in place), fold that input first: the others are then
    // read from untouched buffers and input k is consumed before it is overwritten.
    const size_t first = inplace_.value_or(0);
    std::vector<size_t> order{first};
    for (size_t i = 0; i < ctx.inputs.size(); ++i)
      if (i != first) order.push_back(i);
    for (size_t k = 0; k < order.size(); ++k) {
      const Tensor& x = ctx.input(order[k]);
      const T* px = x.data<T>();
      const BroadcastPlan<2> plan = make_broadcast_plan<2>({y.shape(), x.shape()});
      broadcast_for_each(
          plan, [&](int64_t o, const std::array<int64_t, 2>& in, const std::array<int64_t, 2>& st, int64_t len) {
            C* pa = acc + o;
            const T* pb = px + in[1];
            if (k == 0) {
              for (int64_t i = 0; i < len; ++i) pa[i] = load(pb[i * st[1]]);
            } else if (st[1] == 1) {
              for (int64_t i = 0; i < len; ++i) pa[i] = Op::apply(pa[i], load(pb[i]));
            } else {
              const C v = load(*pb);
              for (int64_t i = 0; i < len; ++i) pa[i] = Op::apply(pa[i], v);
            }
          });
    }
    T* py = y.data<T>();
    const C count = static_cast<C>(ctx.inputs.size());
    if constexpr (Mean || !std::is_same_v<T, C>) {
      map_unary(acc, py, n, [count](C v) {
        if constexpr (Mean) v = v / count;
        return store<T>(v);
      });
    }
    (void)count;
  }

  std::optional<size_t> inplace_;
};

template <class Op, class Types, bool Mean = false>
KernelRegistrar register_variadic(const char* op, int64_t since, int64_t end = kMaxOpset) {
  return register_kernel<VariadicKernel<Op, Types, Mean>, Types>(op, since, end);
}

// Opset 8 added broadcasting; Min and Max take every numeric type from opset 12, floats before.
const KernelRegistrar kRegistrars[] = {
    register_variadic<MinOp, FloatTypes>("Min", 8, 11), register_variadic<MinOp, NumericTypes>("Min", 12),
    register_variadic<MaxOp, FloatTypes>("Max", 8, 11), register_variadic<MaxOp, NumericTypes>("Max", 12),
    register_variadic<SumOp, FloatTypes>("Sum", 8),     register_variadic<SumOp, FloatTypes, true>("Mean", 8),
};

}  // namespace

}  // namespace kiln

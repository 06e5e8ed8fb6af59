// Building blocks shared by the elementwise kernel families (elementwise.cpp, activation.cpp,
// cast.cpp): dtype lists that drive both registration and dispatch, 16-bit floats computed in
// float, integer arithmetic that wraps like numpy instead of overflowing into UB, numpy-style
// float->int conversion, a oneDNN eltwise wrapper, and UnaryKernel<Op>, the generic y = f(x) kernel.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <concepts>
#include <limits>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/dnnl_common.h"
#include "kiln/kernel.h"

namespace kiln {

// ---- dtype lists -----------------------------------------------------------------------------

template <class... Ts>
struct TypeList {
  static std::vector<DType> dtypes() { return {dtype_of<Ts>...}; }
};

using FloatTypes = TypeList<float, double, Half, BFloat16>;
using SignedFloatIntTypes = TypeList<float, double, Half, BFloat16, int8_t, int16_t, int32_t, int64_t>;
using NumericTypes =
    TypeList<float, double, Half, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>;

// Calls f(T{}) for the T of the list whose dtype is t; TypeError naming `what` when none is.
template <class... Ts, class F>
void dispatch(TypeList<Ts...>, DType t, const std::string& what, F&& f) {
  const bool hit = ((t == dtype_of<Ts> ? (f(Ts{}), true) : false) || ...);
  if (!hit) throw TypeError(fmt::format("{} has dtype {}, which this op does not accept", what, dtype_name(t)));
}

// ---- element access: 16-bit floats are computed in float ---------------------------------------

template <class T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<Half> {
  using type = float;
};
template <>
struct ComputeType<BFloat16> {
  using type = float;
};
template <class T>
using compute_t = typename ComputeType<T>::type;

template <class T>
inline compute_t<T> load(T v) {
  if constexpr (std::is_same_v<T, Half>) return half_to_float(v);
  else if constexpr (std::is_same_v<T, BFloat16>) return bfloat16_to_float(v);
  else return v;
}
template <class T>
inline T store(compute_t<T> v) {
  if constexpr (std::is_same_v<T, Half>) return float_to_half(v);
  else if constexpr (std::is_same_v<T, BFloat16>) return float_to_bfloat16(v);
  else return v;
}

// ---- integer arithmetic that wraps (numpy semantics) instead of signed-overflow UB ---------------

template <class T>
using wide_unsigned_t = std::make_unsigned_t<decltype(T() + T())>;

template <class T>
inline T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(wide_unsigned_t<T>(a) + wide_unsigned_t<T>(b));
  else return a + b;
}
template <class T>
inline T wrap_sub(T a, T b) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(wide_unsigned_t<T>(a) - wide_unsigned_t<T>(b));
  else return a - b;
}
template <class T>
inline T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(wide_unsigned_t<T>(a) * wide_unsigned_t<T>(b));
  else return a * b;
}
template <class T>
inline T wrap_neg(T a) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(wide_unsigned_t<T>(0) - wide_unsigned_t<T>(a));
  else return -a;
}

// ---- float -> integer conversion as numpy's astype does it on x86 ---------------------------------
// In range: truncation toward zero. Out of range or NaN, C++ leaves the result undefined; numpy
// gives what the x86 conversion instructions give: narrow types go through int32 and wrap, int32
// and int64 saturate to their minimum ("integer indefinite"), uint32 goes through int64 and wraps,
// uint64 takes [2^63, 2^64) directly. We reproduce that so results never depend on UB.

inline int32_t float_to_int32(double v) {
  if (!(v > -2147483649.0 && v < 2147483648.0)) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(v);
}
inline int64_t float_to_int64(double v) {
  if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}
template <class T>
inline T float_to_int(double v) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if constexpr (sizeof(T) < 4) {
    return static_cast<T>(float_to_int32(v));  // modular narrowing (C++20)
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return float_to_int32(v);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return float_to_int64(v);
  } else if constexpr (std::is_same_v<T, uint32_t>) {
    return static_cast<uint32_t>(float_to_int64(v));
  } else {  // uint64_t
    if (v >= 9223372036854775808.0 && v < 18446744073709551616.0) return static_cast<uint64_t>(v);
    if (v >= 18446744073709551616.0) return 0;
    return static_cast<uint64_t>(float_to_int64(v));
  }
}

// ---- oneDNN eltwise -------------------------------------------------------------------------------

struct DnnlAlgo {
  dnnl::algorithm algorithm;
  float alpha = 0.f;
  float beta = 0.f;
};

// A forward-inference eltwise primitive over a contiguous f32 buffer of one element count. The
// data are described as 1-D: elementwise math ignores shape, and any rank fits oneDNN's limits.
class DnnlEltwise {
 public:
  void build(const DnnlAlgo& algo, int64_t numel) {
    numel_ = numel;
    desc_ = dnnl_util::plain_desc({numel});
    dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, algo.algorithm, desc_, algo.alpha, algo.beta);
    prim_ = dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(d, dnnl_util::engine()));
  }
  void reset() { prim_.reset(); }
  bool ready_for(int64_t numel) const { return prim_.has_value() && numel == numel_; }
  void run(const Tensor& x, Tensor& y) {
    dnnl::memory src = dnnl_util::memory_of(desc_, x);
    dnnl::memory dst = dnnl_util::memory_of(desc_, y);
    prim_->execute(dnnl_util::stream(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
    dnnl_util::stream().wait();
  }

 private:
  int64_t numel_ = -1;
  dnnl::memory::desc desc_;
  std::optional<dnnl::eltwise_forward> prim_;
};

// ---- y = f(x) -----------------------------------------------------------------------------------

// y[i] = f(x[i]) over n elements, in parallel chunks.
template <class T, class U, class F>
void map_unary(const T* x, U* y, int64_t n, F f) {
  parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = f(x[i]);
  });
}

template <class Op>
concept HasDnnlAlgo = requires(const Op& op) {
  { op.dnnl() } -> std::same_as<std::optional<DnnlAlgo>>;
};

// An Op with its own whole-array float32 loop (vector code), used instead of the per-element one.
template <class Op>
concept HasFloat32Loop = requires(const Op& op, const float* x, float* y, int64_t n) {
  op.run_float32(x, y, n);
};

// The generic unary kernel. Op is constructed from the node (to read attributes) and provides
//   using Types = TypeList<...>;                        accepted dtypes (also registered)
//   template <class T> T operator()(T x) const;          the math, on compute_t of each dtype
//   std::optional<DnnlAlgo> dnnl() const;                optional: oneDNN's equivalent for float32
//   void run_float32(const float*, float*, int64_t) const;   optional: a whole-array float32 loop
template <class Op>
class UnaryKernel final : public Kernel {
 public:
  explicit UnaryKernel(const Node& n) : Kernel(n), op_(n) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    return {TensorMeta{ctx.dtype(0), ctx.shape(0), false, Tensor()}};
  }

  void prepare(const InferContext& ctx, const std::vector<TensorMeta>& outputs) override {
    dnnl_.reset();
    if constexpr (HasDnnlAlgo<Op>) {
      const int64_t n = numel(outputs[0].shape);
      if (ctx.dtype(0) == DType::Float32 && n > 0)
        if (std::optional<DnnlAlgo> algo = op_.dnnl()) dnnl_.build(*algo, n);
    }
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (dnnl_.ready_for(x.numel())) {
      dnnl_.run(x, y);
      return;
    }
    if constexpr (HasFloat32Loop<Op>) {
      if (x.dtype() == DType::Float32) return op_.run_float32(x.data<float>(), y.data<float>(), x.numel());
    }
    dispatch(typename Op::Types{}, x.dtype(), fmt::format("input '{}'", node_.inputs.at(0)), [&](auto tag) {
      using T = decltype(tag);
      map_unary(x.data<T>(), y.data<T>(), x.numel(), [this](T v) { return store<T>(op_(load(v))); });
    });
  }

  std::optional<size_t> inplace_input() const override { return 0; }

 private:
  Op op_;
  DnnlEltwise dnnl_;
};

// ---- registration -------------------------------------------------------------------------------

template <class K, class Types>
KernelRegistrar register_kernel(const char* op, int64_t since, int64_t end = kMaxOpset, size_t type_input = 0) {
  return KernelRegistrar({"", op, since, end, Types::dtypes(), type_input, {}},
                         [](const Node& n) { return std::make_unique<K>(n); });
}

template <class Op>
KernelRegistrar register_unary(const char* op, int64_t since, int64_t end = kMaxOpset) {
  return register_kernel<UnaryKernel<Op>, typename Op::Types>(op, since, end);
}

// "'X'" for input i of the node, or "#i" when it has no name (omitted or out of range).
inline std::string input_label(const Node& node, size_t i) {
  return i < node.inputs.size() && !node.inputs[i].empty() ? fmt::format("'{}'", node.inputs[i])
                                                           : fmt::format("#{}", i);
}

// TypeError unless inputs 0 and 1 of the node share a dtype, naming both.
inline void check_same_dtype(const Node& node, const InferContext& ctx) {
  if (ctx.dtype(0) != ctx.dtype(1))
    throw TypeError(fmt::format("inputs {} ({}) and {} ({}) must have the same dtype", input_label(node, 0),
                                dtype_name(ctx.dtype(0)), input_label(node, 1), dtype_name(ctx.dtype(1))));
}

// The output shape of an op broadcasting inputs [0, n); ShapeError naming the inputs that clash.
Shape broadcast_inputs(const InferContext& ctx, size_t n);

// The first of inputs [0, n) whose dtype and shape equal the output's, which the output may then
// overwrite in place (Kernel::inplace_input); nullopt if none.
inline std::optional<size_t> same_as_output(const InferContext& ctx, size_t n, DType out_dtype, const Shape& out) {
  for (size_t i = 0; i < n; ++i)
    if (ctx.has_input(i) && ctx.dtype(i) == out_dtype && ctx.shape(i) == out) return i;
  return std::nullopt;
}

}  // namespace kiln

// Cast (to the dtype named by attribute `to`) and CastLike (to the dtype of a second input), between
// every pair of Kiln dtypes, with numpy's astype semantics:
//   float -> int   truncates toward zero (out of range and NaN as x86 numpy, see float_to_int)
//   x -> bool      x != 0 (NaN is true);  bool -> x  gives 0 or 1
//   int -> int     wraps modulo 2^bits
//   -> float16 / bfloat16  round to nearest even, NaN kept; from double (and int64) without double
//                          rounding: the value is first rounded to float with round-to-odd.
//   to and from string     numpy's str() and parsing (kernels/cpu/string_cast.h)
#include <cmath>
#include <cstring>

#include "kernels/cpu/elementwise_common.h"
#include "kernels/cpu/low_precision.h"
#include "kernels/cpu/string_cast.h"

namespace kiln {

namespace {

using AllTypes = TypeList<float, double, Half, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                          uint64_t, bool>;

// The ONNX TensorProto.DataType element types Kiln lacks, by name, for the message.
struct OnnxType {
  int64_t code;
  const char* name;
};
constexpr OnnxType kMissingOnnxTypes[] = {
    {14, "complex64"},  {15, "complex128"},     {17, "float8e4m3fn"}, {18, "float8e4m3fnuz"},
    {19, "float8e5m2"}, {20, "float8e5m2fnuz"}, {21, "uint4"},        {22, "int4"},
};

DType dtype_from_to_attr(int64_t to) {
  if (const auto d = dtype_from_onnx(to)) return *d;
  for (const OnnxType& t : kMissingOnnxTypes)
    if (t.code == to)
      throw Unsupported(fmt::format("Cast to {} (to={}) is not supported: Kiln has no {} tensors", t.name, to, t.name));
  throw InvalidModel(fmt::format("attribute 'to' = {} is not an ONNX tensor element type", to));
}

// The float nearest to v with round-to-odd: rounding that again to a narrower float type (half,
// bfloat16) gives the correctly rounded result of v, which a plain double->float->half would not.
float round_to_odd_float(double v) {
  float f = static_cast<float>(v);
  if (std::isfinite(v) && static_cast<double>(f) != v) {
    if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.f);  // truncate
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits |= 1;
    std::memcpy(&f, &bits, 4);
  }
  return f;
}

template <class T>
constexpr bool is_16bit_float = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <class From, class To>
To convert(From v) {
  if constexpr (std::is_same_v<From, To>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return load(v) != 0;
  } else if constexpr (std::is_same_v<From, bool>) {
    if constexpr (is_16bit_float<To>) return store<To>(v ? 1.f : 0.f);
    else return static_cast<To>(v);
  } else if constexpr (is_16bit_float<To>) {
    if constexpr (std::is_same_v<From, float> || is_16bit_float<From>) return store<To>(load(v));
    else return store<To>(round_to_odd_float(static_cast<double>(v)));
  } else if constexpr (std::is_integral_v<To>) {
    if constexpr (std::is_floating_point_v<compute_t<From>>) return float_to_int<To>(static_cast<double>(load(v)));
    else return static_cast<To>(v);  // modular (C++20), as numpy
  } else {                           // float or double
    return static_cast<To>(load(v));
  }
}

// float32 <-> bfloat16, mixed precision's casts, at the CPU's vector width (low_precision.h's
// widen_values / narrow_values; the generic path calls float_to_bfloat16 per element). The same
// rounding: nearest even, NaN kept and quieted.
bool cast_bfloat16_fast(const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (x.dtype() == DType::Float32 && y.dtype() == DType::BFloat16) {
    const float* src = x.data<float>();
    BFloat16* dst = y.data<BFloat16>();
    parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) { narrow_values(src + b, dst + b, e - b); });
    return true;
  }
  if (x.dtype() == DType::BFloat16 && y.dtype() == DType::Float32) {
    const BFloat16* src = x.data<BFloat16>();
    float* dst = y.data<float>();
    parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) { widen_values(src + b, dst + b, e - b); });
    return true;
  }
  return false;
}

void cast_tensor(const Tensor& x, Tensor& y, const Node& node) {
  if (x.dtype() == DType::String || y.dtype() == DType::String) {
    strings::cast(x, y, fmt::format("input '{}'", node.inputs.at(0)));
    return;
  }
  if (x.dtype() == y.dtype()) {
    if (x.raw_data() != y.raw_data() && x.nbytes() > 0) std::memcpy(y.raw_data(), x.raw_data(), x.nbytes());
    return;
  }
  if (cast_bfloat16_fast(x, y)) return;
  dispatch(AllTypes{}, x.dtype(), fmt::format("input '{}'", node.inputs.at(0)), [&](auto ftag) {
    using From = decltype(ftag);
    dispatch(AllTypes{}, y.dtype(), "output", [&](auto ttag) {
      using To = decltype(ttag);
      map_unary(x.data<From>(), y.data<To>(), x.numel(), [](From v) { return convert<From, To>(v); });
    });
  });
}

class CastKernel final : public Kernel {
 public:
  // like_input: CastLike, whose target dtype is that of input 1; else Cast's attribute `to`.
  CastKernel(const Node& n, bool like_input) : Kernel(n), like_(like_input) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const DType to = like_ ? ctx.dtype(1) : dtype_from_to_attr(node_.attr_int("to"));
    same_dtype_ = to == ctx.dtype(0);
    TensorMeta out{to, ctx.shape(0), false, Tensor()};
    return {out};
  }

  void compute(ComputeContext& ctx) override { cast_tensor(ctx.input(0), ctx.output(0), node_); }

  // Converting in place is safe elementwise, but the planner only shares buffers of one dtype.
  std::optional<size_t> inplace_input() const override { return same_dtype_ ? std::optional<size_t>(0) : std::nullopt; }

 private:
  bool like_;
  bool same_dtype_ = false;
};

template <bool Like>
KernelRegistrar register_cast(const char* op, int64_t since) {
  std::vector<DType> dtypes = AllTypes::dtypes();
  dtypes.push_back(DType::String);  // to and from numbers: kernels/cpu/string_cast.h
  return KernelRegistrar({"", op, since, kMaxOpset, std::move(dtypes), 0, {}},
                         [](const Node& n) { return std::make_unique<CastKernel>(n, Like); });
}

// Cast-13 added bfloat16 and Cast-19 a `saturate` attribute that only concerns float8 types, which
// Kiln does not have: one kernel serves every version.
const KernelRegistrar kRegistrars[] = {
    register_cast<false>("Cast", 6),
    register_cast<true>("CastLike", 15),
};

}  // namespace

}  // namespace kiln

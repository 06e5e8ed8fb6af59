// Ops that generate their output rather than transform an input's elements: Range, EyeLike, OneHot
// (shapes from input values), Trilu (a mask) and NonZero (a shape from the data itself). Ops whose
// output shape depends on input contents read them through ctx.value(), which defers inference
// to run time when those contents are fed.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/parallel.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

// A scalar input (rank 0, or rank 1 with one element, which exporters also emit) as double.
double scalar_value(const Tensor& t, const char* what) {
  if (t.numel() != 1 || t.rank() > 1) throw ShapeError(fmt::format("{} must be a scalar, got {}", what, t.describe()));
  return t.contiguous().item_as_double(0);
}

// ---------------------------------------------------------------------------------------------
// Range: start, start + delta, ... while short of limit; max(ceil((limit - start) / delta), 0)
// elements. Integer counts are computed exactly, float counts as the spec writes them.
class RangeKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const DType dt = ctx.dtype(0);
    for (size_t i = 1; i < 3; ++i)
      if (ctx.dtype(i) != dt)
        throw TypeError(fmt::format("start, limit and delta must share a dtype: start is {}, input {} is {}",
                                    dtype_name(dt), i, dtype_name(ctx.dtype(i))));
    const Tensor& start = ctx.value(0);
    const Tensor& limit = ctx.value(1);
    const Tensor& delta = ctx.value(2);
    int64_t n = 0;
    visit_dtype(dt, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
        const T s = read<T>(start, "start"), l = read<T>(limit, "limit"), d = read<T>(delta, "delta");
        if (d == T(0)) throw InvalidArgument(fmt::format("delta is 0 (start {}, limit {})", s, l));
        n = count(s, l, d);
      } else {
        throw TypeError(fmt::format("Range takes float, double, int16, int32 or int64, got {}", dtype_name(dt)));
      }
    });
    return {{dt, {n}, false, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    Tensor& out = ctx.output(0);
    visit_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
        const T s = read<T>(ctx.input(0), "start"), d = read<T>(ctx.input(2), "delta");
        T* p = out.data<T>();
        for (int64_t i = 0; i < out.numel(); ++i) p[i] = static_cast<T>(s + static_cast<T>(i) * d);
      }
    });
  }

 private:
  template <class T>
  static T read(const Tensor& t, const char* what) {
    if (t.numel() != 1 || t.rank() > 1)
      throw ShapeError(fmt::format("{} must be a scalar, got {}", what, t.describe()));
    return *t.contiguous().data<T>();
  }
  template <class T>
  static int64_t count(T s, T l, T d) {
    if constexpr (std::is_integral_v<T>) {
      const int64_t span = static_cast<int64_t>(l) - static_cast<int64_t>(s), step = static_cast<int64_t>(d);
      if (step > 0) return span > 0 ? (span + step - 1) / step : 0;
      return span < 0 ? (-span - step - 1) / -step : 0;
    } else {
      const double n = std::ceil(static_cast<double>(l - s) / static_cast<double>(d));
      if (!std::isfinite(n)) throw InvalidArgument(fmt::format("Range({}, {}, {}) has no finite length", s, l, d));
      return std::max<int64_t>(0, static_cast<int64_t>(n));
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Trilu: keeps the upper (j - i >= k) or lower (j - i <= k) triangle of the last two dims.
class TriluKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& s = ctx.shape(0);
    if (s.size() < 2) throw ShapeError(fmt::format("input must have rank >= 2, got {}", to_string(s)));
    if (ctx.has_input(1) && (ctx.dtype(1) != DType::Int64 || numel(ctx.shape(1)) != 1))
      throw TypeError(
          fmt::format("k must be an int64 scalar, got {}{}", dtype_name(ctx.dtype(1)), to_string(ctx.shape(1))));
    upper_ = node_.attr_int("upper", 1) != 0;
    return {{ctx.dtype(0), s, ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    const int64_t k = ctx.has_input(1) ? ctx.input(1).to_int64_vector().at(0) : 0;
    const int64_t rows = in.dim(-2), cols = in.dim(-1);
    const int64_t mats = rows * cols == 0 ? 0 : in.numel() / (rows * cols);
    const size_t esize = dtype_size(in.dtype());
    const char* src = static_cast<const char*>(in.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    parallel_for(mats * rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, cols)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t i = r % rows;
        // Kept columns: [i + k, cols) for upper, [0, i + k] for lower; the rest become zero.
        const int64_t keep_lo = upper_ ? std::clamp<int64_t>(i + k, 0, cols) : 0;
        const int64_t keep_hi = upper_ ? cols : std::clamp<int64_t>(i + k + 1, 0, cols);
        char* o = dst + r * cols * static_cast<int64_t>(esize);
        const char* x = src + r * cols * static_cast<int64_t>(esize);
        const auto bytes = [&](int64_t n) { return static_cast<size_t>(std::max<int64_t>(0, n)) * esize; };
        std::memset(o, 0, bytes(keep_lo));  // zero bits are zero in every dtype
        if (keep_hi > keep_lo && o != x) std::memcpy(o + bytes(keep_lo), x + bytes(keep_lo), bytes(keep_hi - keep_lo));
        std::memset(o + bytes(std::max(keep_hi, keep_lo)), 0, bytes(cols - std::max(keep_hi, keep_lo)));
      }
    });
  }
  std::optional<size_t> inplace_input() const override { return 0; }

 private:
  bool upper_ = true;
};

// ---------------------------------------------------------------------------------------------
// EyeLike: zeros of the input's 2-D shape with ones on diagonal k, in the `dtype` attribute's type.
class EyeLikeKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& s = ctx.shape(0);
    if (s.size() != 2) throw ShapeError(fmt::format("input must be 2-D, got {}", to_string(s)));
    DType dt = ctx.dtype(0);
    if (node_.has_attr("dtype")) {
      const int64_t code = node_.attr_int("dtype");
      const auto mapped = dtype_from_onnx(code);
      if (!mapped || *mapped == DType::String)
        throw Unsupported(fmt::format("dtype {} is not an ONNX element type Kiln supports", code));
      dt = *mapped;
    }
    k_ = node_.attr_int("k", 0);
    return {{dt, s, ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    Tensor& out = ctx.output(0);
    std::memset(out.raw_data(), 0, out.nbytes());
    const int64_t rows = out.dim(0), cols = out.dim(1);
    visit_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = out.data<T>();
      const T one = from_double<T>(1.0);
      for (int64_t i = std::max<int64_t>(0, -k_); i < rows && i + k_ < cols; ++i) p[i * cols + i + k_] = one;
    });
  }

 private:
  int64_t k_ = 0;
};

// ---------------------------------------------------------------------------------------------
// OneHot: output[..., j, ...] (j on `axis`) is values[1] where j equals the index (negative ones
// count from the end), else values[0]; indices outside [-depth, depth-1] give all off values.
class OneHotKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& is = ctx.shape(0);
    const double depth = scalar_value(ctx.value(1), "depth");
    if (!(depth >= 0) || depth != std::floor(depth))
      throw InvalidArgument(fmt::format("depth must be a non-negative whole number, got {}", depth));
    depth_ = static_cast<int64_t>(depth);
    if (numel(ctx.shape(2)) != 2 || ctx.shape(2).size() != 1)
      throw ShapeError(
          fmt::format("values must be [off_value, on_value] (shape [2]), got {}", to_string(ctx.shape(2))));
    const int64_t out_rank = static_cast<int64_t>(is.size()) + 1;
    axis_ = normalize_axis(node_.attr_int("axis", -1), out_rank);
    Shape out = is;
    out.insert(out.begin() + axis_, depth_);
    return {{ctx.dtype(2), out, ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& indices = ctx.input(0);
    const Tensor& values = ctx.input(2);
    Tensor& out = ctx.output(0);
    const Shape& is = indices.shape();
    const int64_t outer = numel(Shape(is.begin(), is.begin() + axis_));
    const int64_t inner = numel(Shape(is.begin() + axis_, is.end()));
    const size_t esize = dtype_size(out.dtype());
    const char* off = static_cast<const char*>(values.raw_data());
    const char* on = off + esize;
    char* dst = static_cast<char*>(out.raw_data());
    for (int64_t i = 0; i < out.numel(); ++i) std::memcpy(dst + i * static_cast<int64_t>(esize), off, esize);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        double v = indices.item_as_double(o * inner + i);
        if (v != std::floor(v) || v < -static_cast<double>(depth_) || v >= static_cast<double>(depth_)) continue;
        if (v < 0) v += static_cast<double>(depth_);
        const int64_t at = (o * depth_ + static_cast<int64_t>(v)) * inner + i;
        std::memcpy(dst + at * static_cast<int64_t>(esize), on, esize);
      }
  }

 private:
  int64_t depth_ = 0;
  int64_t axis_ = 0;
};

// ---------------------------------------------------------------------------------------------
// NonZero: the coordinates of non-zero elements as int64 [rank, count], in row-major order. The
// count is the output shape, so infer() reads the data (at run time unless it is a constant).
// A scalar counts as 1-D (numpy's behaviour), giving [1, count].
template <class T>
bool is_nonzero(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return to_double(v) != 0.0;  // NaN too
  else return v != T(0);
}

int64_t count_nonzero(const Tensor& t) {
  const Tensor c = t.contiguous();
  int64_t n = 0;
  visit_dtype(c.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(c.raw_data());
    for (int64_t i = 0; i < c.numel(); ++i) n += is_nonzero(p[i]) ? 1 : 0;
  });
  return n;
}

class NonZeroKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Tensor& data = ctx.value(0);
    const int64_t rank = std::max<int64_t>(1, data.rank());
    return {{DType::Int64, {rank, count_nonzero(data)}, false, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    const Shape shape = in.rank() == 0 ? Shape{1} : in.shape();
    const int64_t count = out.dim(1);
    int64_t* p = out.data<int64_t>();
    int64_t found = 0;
    visit_dtype(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(in.raw_data());
      Shape pos(shape.size(), 0);
      for (int64_t i = 0; i < in.numel(); ++i) {
        if (is_nonzero(x[i])) {
          // Counted past the planned size too, so that a mismatch is reported, not overrun.
          if (found < count)
            for (size_t d = 0; d < shape.size(); ++d) p[static_cast<int64_t>(d) * count + found] = pos[d];
          ++found;
        }
        for (size_t d = shape.size(); d-- > 0;) {
          if (++pos[d] < shape[d]) break;
          pos[d] = 0;
        }
      }
    });
    if (found != count)
      throw Error(fmt::format("input {} has {} non-zero elements, but the output was planned for {}", in.describe(),
                              found, count));
  }
};

template <class K>
KernelRegistrar reg(const char* op, int64_t since, std::vector<DType> dtypes = {}) {
  return KernelRegistrar({"", op, since, kMaxOpset, std::move(dtypes)},
                         [](const Node& n) { return std::make_unique<K>(n); });
}

const KernelRegistrar reg_range =
    reg<RangeKernel>("Range", 11, {DType::Float32, DType::Float64, DType::Int16, DType::Int32, DType::Int64});
const KernelRegistrar reg_trilu = reg<TriluKernel>("Trilu", 14);
const KernelRegistrar reg_eye_like = reg<EyeLikeKernel>("EyeLike", 9);
const KernelRegistrar reg_one_hot = reg<OneHotKernel>("OneHot", 9);
const KernelRegistrar reg_non_zero = reg<NonZeroKernel>("NonZero", 9);

}  // namespace
}  // namespace kiln

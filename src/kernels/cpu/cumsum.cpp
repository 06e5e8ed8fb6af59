// CumSum along an axis given as a scalar input, with exclusive (each output leaves out its own
// element) and reverse (sums run from the end). Floats accumulate in double, integers wrap.
#include "kernels/cpu/elementwise_common.h"

namespace kiln {

namespace {

using CumSumTypes = TypeList<float, double, Half, BFloat16, int32_t, int64_t, uint32_t, uint64_t>;

template <class T>
using sum_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, T>;

class CumSumKernel final : public Kernel {
 public:
  explicit CumSumKernel(const Node& n)
      : Kernel(n), exclusive_(n.attr_int("exclusive", 0) != 0), reverse_(n.attr_int("reverse", 0) != 0) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& in = ctx.shape(0);
    if (in.empty())
      throw ShapeError(fmt::format("input {} is a scalar; CumSum needs rank >= 1", input_label(node_, 0)));
    if ((ctx.dtype(1) != DType::Int64 && ctx.dtype(1) != DType::Int32) || numel(ctx.shape(1)) != 1 ||
        ctx.shape(1).size() > 1)
      throw TypeError(fmt::format("axis {} must be an int32 or int64 scalar (or 1-element 1-D tensor), got {}{}",
                                  input_label(node_, 1), dtype_name(ctx.dtype(1)), to_string(ctx.shape(1))));
    // The axis only matters at compute time, but reading it here rejects a bad one before running.
    if (ctx.has_value(1)) axis_of(ctx.value(1), in);
    return {TensorMeta{ctx.dtype(0), in, false, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& s = x.shape();
    const int64_t axis = axis_of(ctx.input(1), s);
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= s[static_cast<size_t>(i)];
    for (size_t i = static_cast<size_t>(axis) + 1; i < s.size(); ++i) inner *= s[i];
    const int64_t len = s[static_cast<size_t>(axis)];
    dispatch(CumSumTypes{}, x.dtype(), fmt::format("input {}", input_label(node_, 0)), [&](auto tag) {
      using T = decltype(tag);
      using A = sum_t<T>;
      const T* px = x.data<T>();
      T* py = ctx.output(0).data<T>();
      const bool excl = exclusive_, rev = reverse_;
      // Tasks are (outer index, block of inner positions); each walks the axis with contiguous rows.
      constexpr int64_t kBlock = 256;
      const int64_t blocks = (inner + kBlock - 1) / kBlock;
      const int64_t grain =
          std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, len * std::min(inner, kBlock)));
      parallel_for(outer * blocks, grain, [&](int64_t tb, int64_t te) {
        A acc[kBlock];
        for (int64_t t = tb; t < te; ++t) {
          const int64_t o = t / blocks, j0 = (t % blocks) * kBlock, jn = std::min(kBlock, inner - j0);
          std::fill(acc, acc + jn, A(0));
          for (int64_t step = 0; step < len; ++step) {
            const int64_t k = rev ? len - 1 - step : step;
            const int64_t off = (o * len + k) * inner + j0;
            for (int64_t j = 0; j < jn; ++j) {
              const A v = static_cast<A>(load(px[off + j]));
              if (excl) {
                py[off + j] = store<T>(static_cast<compute_t<T>>(acc[j]));
                acc[j] = wrap_add(acc[j], v);
              } else {
                acc[j] = wrap_add(acc[j], v);
                py[off + j] = store<T>(static_cast<compute_t<T>>(acc[j]));
              }
            }
          }
        }
      });
    });
  }

  std::optional<size_t> inplace_input() const override { return 0; }

 private:
  int64_t axis_of(const Tensor& axis, const Shape& in) const {
    return normalize_axis(
        axis.to_int64_vector().at(0), static_cast<int64_t>(in.size()),
        fmt::format("axis {} for input {} {}", input_label(node_, 1), input_label(node_, 0), to_string(in)));
  }

  bool exclusive_, reverse_;
};

// CumSum-14 only added float16 and bfloat16, which both versions accept here.
const KernelRegistrar kRegistrar = register_kernel<CumSumKernel, CumSumTypes>("CumSum", 11);

}  // namespace

}  // namespace kiln

// ArgMax and ArgMin along one axis (keepdims, select_last_index), int64 output. Ties give the first
// index, or the last with select_last_index. As numpy's argmax/argmin, both pick a NaN when there
// is one (the NaN maximum or minimum), so NaN behaves as better than any number.
#include "kernels/cpu/elementwise_common.h"

namespace kiln {

namespace {

// Whether v should replace the current best b: strictly better, or equal when the last index wins.
template <bool Max, class C>
bool replaces(C v, C b, bool last) {
  if constexpr (std::is_floating_point_v<C>) {
    if (b != b) return last && v != v;  // a NaN best is only replaced by a later NaN
    if (v != v) return true;
  }
  return Max ? (v > b || (last && v == b)) : (v < b || (last && v == b));
}

template <bool Max>
class ArgReduceKernel final : public Kernel {
 public:
  explicit ArgReduceKernel(const Node& n)
      : Kernel(n),
        axis_attr_(n.attr_int("axis", 0)),
        keepdims_(n.attr_int("keepdims", 1) != 0),
        last_(n.attr_int("select_last_index", 0) != 0) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const int64_t rank = static_cast<int64_t>(in.size());
    if (rank == 0)
      throw ShapeError(fmt::format("input {} is a scalar; it needs an axis to reduce", input_label(node_, 0)));
    axis_ = normalize_axis(axis_attr_, rank,
                           fmt::format("attribute axis of input {} {}", input_label(node_, 0), to_string(in)));
    Shape out = in;
    int64_t rest = 1;  // output elements
    for (int64_t i = 0; i < rank; ++i)
      if (i != axis_) rest *= in[static_cast<size_t>(i)];
    if (in[static_cast<size_t>(axis_)] == 0 && rest > 0)
      throw ShapeError(fmt::format("input {} {} has no elements along axis {}; the {} of nothing is undefined",
                                   input_label(node_, 0), to_string(in), axis_, Max ? "argmax" : "argmin"));
    if (keepdims_) out[static_cast<size_t>(axis_)] = 1;
    else out.erase(out.begin() + axis_);
    return {TensorMeta{DType::Int64, out, false, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& s = x.shape();
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis_; ++i) outer *= s[static_cast<size_t>(i)];
    for (size_t i = static_cast<size_t>(axis_) + 1; i < s.size(); ++i) inner *= s[i];
    const int64_t len = s[static_cast<size_t>(axis_)];
    int64_t* y = ctx.output(0).data<int64_t>();
    dispatch(NumericTypes{}, x.dtype(), fmt::format("input {}", input_label(node_, 0)), [&](auto tag) {
      using T = decltype(tag);
      using C = compute_t<T>;
      const T* px = x.data<T>();
      const bool last = last_;
      const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, len * inner));
      parallel_for(outer, grain, [&](int64_t ob, int64_t oe) {
        std::vector<C> best(static_cast<size_t>(inner));
        for (int64_t o = ob; o < oe; ++o) {
          const T* base = px + o * len * inner;
          int64_t* idx = y + o * inner;
          for (int64_t j = 0; j < inner; ++j) {
            best[static_cast<size_t>(j)] = load(base[j]);
            idx[j] = 0;
          }
          // Along the axis, with the inner positions as the fast loop (contiguous reads).
          for (int64_t k = 1; k < len; ++k) {
            const T* row = base + k * inner;
            for (int64_t j = 0; j < inner; ++j) {
              const C v = load(row[j]);
              if (replaces<Max>(v, best[static_cast<size_t>(j)], last)) {
                best[static_cast<size_t>(j)] = v;
                idx[j] = k;
              }
            }
          }
        }
      });
    });
  }

 private:
  int64_t axis_attr_;
  bool keepdims_, last_;
  int64_t axis_ = 0;
};

// select_last_index arrived in opset 12; earlier versions never set it, so one kernel serves all.
const KernelRegistrar kRegistrars[] = {
    register_kernel<ArgReduceKernel<true>, NumericTypes>("ArgMax", 1),
    register_kernel<ArgReduceKernel<false>, NumericTypes>("ArgMin", 1),
};

}  // namespace

}  // namespace kiln

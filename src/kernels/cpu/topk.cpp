// TopK: the k largest (or smallest) elements along an axis and their int64 indices. Results are
// always sorted (the spec leaves order free when sorted=0, so sorting is a valid answer); equal
// values keep the lower index first, as ONNX's reference does. NaN orders above every number, as in
// numpy's sort, so it is among the largest and after every number among the smallest.
#include <algorithm>

#include "kernels/cpu/elementwise_common.h"

namespace kiln {

namespace {

template <class C>
struct Entry {
  C v;
  int64_t i;
};

template <class C>
bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) return v != v;
  else return false;
}

// Strict weak order: the entry that comes first in the output sorts first.
template <class C>
bool comes_first(const Entry<C>& a, const Entry<C>& b, bool largest) {
  const bool an = is_nan(a.v), bn = is_nan(b.v);
  if (an || bn) {
    if (an && bn) return a.i < b.i;
    return largest ? an : bn;  // NaN is the largest value
  }
  if (a.v != b.v) return largest ? a.v > b.v : a.v < b.v;
  return a.i < b.i;
}

class TopKKernel final : public Kernel {
 public:
  TopKKernel(const Node& n, bool k_input)
      : Kernel(n), k_input_(k_input), axis_attr_(n.attr_int("axis", -1)), largest_(n.attr_int("largest", 1) != 0) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const int64_t rank = static_cast<int64_t>(in.size());
    if (rank == 0) throw ShapeError(fmt::format("input {} is a scalar; TopK needs an axis", input_label(node_, 0)));
    axis_ = normalize_axis(axis_attr_, rank,
                           fmt::format("attribute axis of input {} {}", input_label(node_, 0), to_string(in)));
    if (k_input_) {
      if (ctx.dtype(1) != DType::Int64 || ctx.shape(1) != Shape{1})
        throw TypeError(fmt::format("K {} must be a 1-D int64 tensor of one element, got {}{}", input_label(node_, 1),
                                    dtype_name(ctx.dtype(1)), to_string(ctx.shape(1))));
      k_ = ctx.value(1).to_int64_vector().at(0);
    } else {
      k_ = node_.attr_int("k");
    }
    const int64_t len = in[static_cast<size_t>(axis_)];
    if (k_ < 0 || k_ > len)
      throw ShapeError(fmt::format("K = {} is outside [0, {}], the size of axis {} of input {} {}", k_, len, axis_,
                                   input_label(node_, 0), to_string(in)));
    Shape out = in;
    out[static_cast<size_t>(axis_)] = k_;
    std::vector<TensorMeta> metas{TensorMeta{ctx.dtype(0), out, false, Tensor()}};
    if (node_.outputs.size() > 1) metas.push_back(TensorMeta{DType::Int64, out, false, Tensor()});
    return metas;
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& s = x.shape();
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis_; ++i) outer *= s[static_cast<size_t>(i)];
    for (size_t i = static_cast<size_t>(axis_) + 1; i < s.size(); ++i) inner *= s[i];
    const int64_t len = s[static_cast<size_t>(axis_)];
    const int64_t k = k_;
    const bool largest = largest_;
    Tensor* values = ctx.outputs.size() > 0 ? ctx.outputs[0] : nullptr;
    Tensor* indices = ctx.outputs.size() > 1 ? ctx.outputs[1] : nullptr;
    if (k == 0) return;
    dispatch(NumericTypes{}, x.dtype(), fmt::format("input {}", input_label(node_, 0)), [&](auto tag) {
      using T = decltype(tag);
      using C = compute_t<T>;
      const T* px = x.data<T>();
      T* pv = values && values->defined() ? values->data<T>() : nullptr;
      int64_t* pi = indices && indices->defined() ? indices->data<int64_t>() : nullptr;
      const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, len));
      parallel_for(outer * inner, grain, [&](int64_t b, int64_t e) {
        std::vector<Entry<C>> slice(static_cast<size_t>(len));
        for (int64_t t = b; t < e; ++t) {
          const int64_t o = t / inner, j = t % inner;
          const T* base = px + o * len * inner + j;
          for (int64_t m = 0; m < len; ++m) slice[static_cast<size_t>(m)] = {load(base[m * inner]), m};
          std::partial_sort(slice.begin(), slice.begin() + k, slice.end(),
                            [largest](const Entry<C>& a, const Entry<C>& c) { return comes_first(a, c, largest); });
          const int64_t out0 = o * k * inner + j;
          for (int64_t m = 0; m < k; ++m) {
            if (pv) pv[out0 + m * inner] = store<T>(slice[static_cast<size_t>(m)].v);
            if (pi) pi[out0 + m * inner] = slice[static_cast<size_t>(m)].i;
          }
        }
      });
    });
  }

 private:
  bool k_input_;
  int64_t axis_attr_;
  bool largest_;
  int64_t axis_ = 0, k_ = 0;
};

template <bool KInput>
KernelRegistrar register_topk(int64_t since, int64_t end) {
  return KernelRegistrar({"", "TopK", since, end, NumericTypes::dtypes(), 0, {}},
                         [](const Node& n) { return std::make_unique<TopKKernel>(n, KInput); });
}

// TopK-1 reads k from an attribute; from TopK-10 it is an input (11 added largest, sorted and
// negative axes, which the one kernel reads with their defaults).
const KernelRegistrar kRegistrars[] = {
    register_topk<false>(1, 9),
    register_topk<true>(10, kMaxOpset),
};

}  // namespace

}  // namespace kiln

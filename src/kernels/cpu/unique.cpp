// Unique: the distinct elements of the flattened input, or the distinct slices along `axis`, with
// the optional outputs indices (each one's first occurrence), inverse_indices (for every element or
// slice of the input, its position in Y) and counts. sorted (default 1) orders them ascending
// (slices lexicographically, as numpy.unique); sorted 0 keeps the order of first occurrence. The
// output's length comes from the input's values, so a fed input plans at run time. No gradient
// (autodiff/unique.cpp), as torch.unique has none.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "kiln/kernel.h"

namespace kiln {
namespace {

struct Layout {
  int64_t outer = 1, dim = 0, inner = 1;
};

class UniqueKernel : public Kernel {
 public:
  using Kernel::Kernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Tensor x = ctx.value(0).contiguous();
    const Shape& s = x.shape();
    has_axis_ = node_.has_attr("axis");
    axis_ = has_axis_ ? normalize_axis(node_.attr_int("axis"), static_cast<int64_t>(s.size())) : 0;
    layout_ = has_axis_ ? Layout{numel(Shape(s.begin(), s.begin() + axis_)), s[static_cast<size_t>(axis_)],
                                 numel(Shape(s.begin() + axis_ + 1, s.end()))}
                        : Layout{1, x.numel(), 1};
    group(x);
    Shape y = has_axis_ ? s : Shape{};
    if (has_axis_) y[static_cast<size_t>(axis_)] = static_cast<int64_t>(first_.size());
    else y.push_back(static_cast<int64_t>(first_.size()));
    std::vector<TensorMeta> out{{x.dtype(), y, false, Tensor()}};
    const int64_t k = static_cast<int64_t>(first_.size());
    for (const Shape& shape : {Shape{k}, Shape{layout_.dim}, Shape{k}})
      out.push_back({DType::Int64, shape, false, Tensor()});
    out.resize(node_.outputs.size());
    return out;
  }

  void compute(ComputeContext& ctx) override {
    const Tensor x = ctx.input(0).contiguous();
    group(x);  // the values may differ from planning's when they are fed
    const Layout& l = layout_;
    const size_t es = dtype_size(x.dtype()), row = static_cast<size_t>(l.inner) * es;
    const auto* src = static_cast<const char*>(x.raw_data());
    const int64_t k = static_cast<int64_t>(first_.size());
    Tensor& y = ctx.output(0);
    auto* dst = static_cast<char*>(y.raw_data());
    for (int64_t o = 0; o < l.outer; ++o)
      for (int64_t j = 0; j < k; ++j)
        std::memcpy(dst + static_cast<size_t>(o * k + j) * row,
                    src + static_cast<size_t>(o * l.dim + first_[static_cast<size_t>(j)]) * row, row);
    const std::vector<const std::vector<int64_t>*> extra = {&first_, &inverse_, &counts_};
    for (size_t i = 1; i < ctx.outputs.size() && i <= extra.size(); ++i) {
      Tensor* t = ctx.outputs[i];
      if (t == nullptr || !t->defined()) continue;  // an omitted optional output
      std::copy(extra[i - 1]->begin(), extra[i - 1]->end(), t->data<int64_t>());
    }
  }

 private:
  // Slice j of the input as numpy's moveaxis(axis, 0)[j]: its elements in (outer, inner) order.
  template <class T>
  int compare(const T* x, int64_t a, int64_t b) const {
    const Layout& l = layout_;
    for (int64_t o = 0; o < l.outer; ++o)
      for (int64_t i = 0; i < l.inner; ++i) {
        const T u = x[(o * l.dim + a) * l.inner + i], v = x[(o * l.dim + b) * l.inner + i];
        if (u < v) return -1;
        if (v < u) return 1;
      }
    return 0;
  }

  void group(const Tensor& x) {
    visit_dtype(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_arithmetic_v<T>) group_typed(x.data<T>());
      else throw TypeError(fmt::format("Unique takes numbers and bools, got {}", x.describe()));
    });
  }

  template <class T>
  void group_typed(const T* x) {
    const int64_t n = layout_.dim;
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return compare(x, a, b) < 0; });
    // Runs of equal slices in sorted order; each run's first occurrence is its smallest index.
    std::vector<int64_t> run_first, run_of(static_cast<size_t>(n)), run_count;
    for (size_t i = 0; i < order.size(); ++i) {
      if (i == 0 || compare(x, order[i - 1], order[i]) != 0) {
        run_first.push_back(order[i]);
        run_count.push_back(0);
      }
      run_of[static_cast<size_t>(order[i])] = static_cast<int64_t>(run_first.size()) - 1;
      ++run_count.back();
    }
    std::vector<int64_t> position(run_first.size());  // run -> its place in Y
    std::iota(position.begin(), position.end(), 0);
    if (node_.attr_int("sorted", 1) == 0)
      std::sort(position.begin(), position.end(), [&](int64_t a, int64_t b) {
        return run_first[static_cast<size_t>(a)] < run_first[static_cast<size_t>(b)];
      });
    std::vector<int64_t> place(run_first.size());
    for (size_t p = 0; p < position.size(); ++p) place[static_cast<size_t>(position[p])] = static_cast<int64_t>(p);
    first_.assign(run_first.size(), 0);
    counts_.assign(run_first.size(), 0);
    for (size_t r = 0; r < run_first.size(); ++r) {
      first_[static_cast<size_t>(place[r])] = run_first[r];
      counts_[static_cast<size_t>(place[r])] = run_count[r];
    }
    inverse_.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j)
      inverse_[static_cast<size_t>(j)] = place[static_cast<size_t>(run_of[static_cast<size_t>(j)])];
  }

  bool has_axis_ = false;
  int64_t axis_ = 0;
  Layout layout_;
  std::vector<int64_t> first_, inverse_, counts_;
};

const KernelRegistrar reg_unique({"", "Unique", 11, kMaxOpset},
                                 [](const Node& n) { return std::make_unique<UniqueKernel>(n); });

}  // namespace
}  // namespace kiln

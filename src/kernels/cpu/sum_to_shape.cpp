// ai.kiln.SumToShapeOf: sums a gradient that has a broadcast shape back to the shape of the tensor
// that was broadcast. The gradient builder inserts it after rules of broadcasting ops.
#include <fmt/format.h>

#include "core/parallel.h"
#include "kiln/autodiff.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

class SumToShapeOf : public Kernel {
 public:
  using Kernel::Kernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& g = ctx.shape(0);
    const Shape& like = ctx.shape(1);
    if (like.size() > g.size())
      throw ShapeError(fmt::format("gradient {} has lower rank than target {}", to_string(g), to_string(like)));
    const size_t lead = g.size() - like.size();
    for (size_t i = 0; i < like.size(); ++i)
      if (like[i] != 1 && like[i] != g[lead + i])
        throw ShapeError(fmt::format("gradient {} does not broadcast from target {}", to_string(g), to_string(like)));
    // The builder inserts this op whenever it cannot prove the shapes equal; when they are, the
    // output is the input's buffer and nothing runs.
    same_ = numel(g) == numel(like);
    // Only leading dims reduced (a bias of [B, S, D] -> [D]): rows of the target's size are summed.
    size_t first_kept = lead;
    while (first_kept < g.size() && like[first_kept - lead] == 1) ++first_kept;
    leading_ = true;
    for (size_t i = first_kept; i < g.size(); ++i) leading_ = leading_ && like[i - lead] == g[i];
    return {{ctx.dtype(0), like}};
  }

  bool output_aliases_input() const override { return same_; }

  void compute(ComputeContext& ctx) override {
    visit_dtype(ctx.input(0).dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) run<T>(ctx);
      else throw TypeError(fmt::format("SumToShapeOf supports float and double, got {}", ctx.input(0).describe()));
    });
  }

 private:
  template <class T>
  void run(ComputeContext& ctx) {
    const Tensor& g = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (same_) {
      if (y.raw_data() != g.raw_data()) y.copy_from(g.reshape(y.shape()));
      return;
    }
    if (leading_) return sum_rows<T>(g, y);
    const Shape& gs = g.shape();
    const size_t rank = gs.size();
    const size_t lead = rank - y.shape().size();
    // Output strides over the gradient's dims: 0 where the target broadcast (or lacks the dim).
    Strides ostride(rank, 0);
    const Strides ys = contiguous_strides(y.shape());
    for (size_t i = lead; i < rank; ++i) ostride[i] = y.shape()[i - lead] == 1 ? 0 : ys[i - lead];
    const int64_t n = g.numel();
    const T* src = g.data<T>();
    T* dst = y.data<T>();
    const int64_t ny = y.numel();
    // Sum in double, split over output elements so threads never write the same place.
    std::vector<double> acc(static_cast<size_t>(ny), 0.0);
    std::vector<int64_t> idx(rank, 0);
    int64_t off = 0;
    for (int64_t k = 0; k < n; ++k) {
      acc[static_cast<size_t>(off)] += static_cast<double>(src[k]);
      for (size_t i = rank; i-- > 0;) {
        off += ostride[i];
        if (++idx[i] < gs[i]) break;
        off -= ostride[i] * gs[i];
        idx[i] = 0;
      }
    }
    for (int64_t k = 0; k < ny; ++k) dst[k] = static_cast<T>(acc[static_cast<size_t>(k)]);
  }

  // y[j] = sum over rows r of g[r * n + j], columns split across threads (each sums its own).
  template <class T>
  static void sum_rows(const Tensor& g, Tensor& y) {
    const int64_t n = y.numel();
    const int64_t rows = n == 0 ? 0 : g.numel() / n;
    const T* src = g.data<T>();
    T* dst = y.data<T>();
    parallel_for(n, 256, [&](int64_t b, int64_t e) {
      std::vector<double> acc(static_cast<size_t>(e - b), 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = src + r * n;
        for (int64_t j = b; j < e; ++j) acc[static_cast<size_t>(j - b)] += static_cast<double>(row[j]);
      }
      for (int64_t j = b; j < e; ++j) dst[j] = static_cast<T>(acc[static_cast<size_t>(j - b)]);
    });
  }

  bool same_ = false;
  bool leading_ = false;
};

const KernelRegistrar reg({kKilnDomain, "SumToShapeOf", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                          [](const Node& n) { return std::make_unique<SumToShapeOf>(n); });
const OpDocRegistrar doc({kKilnDomain, "SumToShapeOf",
                          "Reduces a gradient of a broadcast result to the shape of the broadcast operand.",
                          {"G: the gradient, with the broadcast (output) shape", "X: the operand; only its shape is read"},
                          {"Y: G summed over the dims that X broadcast (leading dims X lacks, and dims where X has 1), "
                           "with X's shape"},
                          "Y[j] = sum over all i that broadcast to j of G[i] (numpy: G.sum(axes).reshape(X.shape))"});

}  // namespace
}  // namespace kiln

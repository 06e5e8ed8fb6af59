// ai.kiln.GatherGrad, the gradient of Gather (gather.cpp): scatter-adds the output gradient back
// into zeros of the data's shape.
#include <fmt/format.h>

#include <algorithm>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/int_values.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

// ai.kiln.GatherGrad(dY, shape, indices): dX of Gather(X, indices) for X of `shape`. Rows picked
// several times accumulate. Work is split over (outer row, block of inner columns) so that threads
// never write the same element and the sum order (over indices, in order) is deterministic.
class GatherGradKernel : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape data = int64_values(ctx.value(1), "shape");
    if (data.empty()) throw ShapeError("the data shape has rank 0; Gather needs rank >= 1");
    axis_ = normalize_axis(node_.attr_int("axis", 0), static_cast<int64_t>(data.size()));
    Shape expected(data.begin(), data.begin() + axis_);
    expected.insert(expected.end(), ctx.shape(2).begin(), ctx.shape(2).end());
    expected.insert(expected.end(), data.begin() + axis_ + 1, data.end());
    if (ctx.shape(0) != expected)
      throw ShapeError(fmt::format("dY {} must have shape {} (data {} gathered by indices {} on axis {})",
                                   to_string(ctx.shape(0)), to_string(expected), to_string(data),
                                   to_string(ctx.shape(2)), axis_));
    return {{ctx.dtype(0), data, ctx.input(0).dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    Tensor& dx = ctx.output(0);
    visit_dtype(dx.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) run<T>(ctx);
      else throw TypeError(fmt::format("GatherGrad supports float and double, got {}", dx.describe()));
    });
  }

 private:
  template <class T>
  void run(ComputeContext& ctx) {
    const Tensor& dy = ctx.input(0);
    const Tensor& indices = ctx.input(2);
    Tensor& dx = ctx.output(0);
    const Shape& s = dx.shape();
    const int64_t dim = s[axis_];
    std::vector<int64_t> idx = int_values(indices, "indices");
    for (size_t j = 0; j < idx.size(); ++j) {
      const int64_t v = idx[j];
      if (v < -dim || v >= dim)
        throw InvalidArgument(fmt::format("index {} (at {} of indices {}) is out of range for axis {} of size {}", v,
                                          index_position(static_cast<int64_t>(j), indices.shape()), indices.describe(),
                                          axis_, dim));
      if (v < 0) idx[j] = v + dim;
    }
    T* out = dx.data<T>();
    std::fill(out, out + dx.numel(), T(0));
    const int64_t n = static_cast<int64_t>(idx.size());
    const int64_t outer = numel(Shape(s.begin(), s.begin() + axis_));
    const int64_t inner = numel(Shape(s.begin() + axis_ + 1, s.end()));
    if (n == 0 || outer == 0 || inner == 0) return;
    const T* g = dy.data<T>();
    constexpr int64_t kBlock = 256;
    const int64_t blocks = (inner + kBlock - 1) / kBlock;
    parallel_for(outer * blocks, 1, [&](int64_t b, int64_t e) {
      for (int64_t u = b; u < e; ++u) {
        const int64_t o = u / blocks, c0 = (u % blocks) * kBlock, c1 = std::min(inner, c0 + kBlock);
        for (int64_t j = 0; j < n; ++j) {
          const T* src = g + (o * n + j) * inner;
          T* dst = out + (o * dim + idx[j]) * inner;
          for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
        }
      }
    });
  }

  int64_t axis_ = 0;
};

const KernelRegistrar reg_gather_grad({kKilnDomain, "GatherGrad", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                                      [](const Node& n) { return std::make_unique<GatherGradKernel>(n); });
const OpDocRegistrar doc_gather_grad(
    {kKilnDomain,
     "GatherGrad",
     "The gradient of Gather with respect to its data: a scatter-add into zeros.",
     {"dY: the gradient of Gather's output", "shape: int64 [r], the shape of Gather's data",
      "indices: Gather's int32/int64 indices (negative ones count from the end)"},
     {"dX: the gradient of data, of the given shape"},
     "attribute axis (default 0) as Gather's. dX = 0; then for every outer position o, index position j and inner "
     "position i: dX[o, indices[j], i] += dY[o, j, i] (repeated indices accumulate)"});

}  // namespace
}  // namespace kiln

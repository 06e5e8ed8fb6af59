// ai.kiln.SoftmaxGrad(dY, Y): the gradient of Softmax (opset 13: one axis) in one kernel,
// dX = Y (dY - sum over the axis of dY Y), where the standard-op form runs four passes (Mul,
// ReduceSum, Sub, Mul) over the attention scores and writes two temporaries of their size.
// ai.kiln.MaskedSoftmaxGrad(dY, Y, cond): the same for ai.kiln.MaskedSoftmax (softmax_fused.cpp),
// with its mask and scale applied in the pass (the Where's and the Mul's gradients).
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/masked_softmax_common.h"
#include "kernels/cpu/pair_grad.h"
#include "kernels/cpu/simd_dispatch.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

// Rows [r0, r1) of `len` elements each, softmax along the row (a simd_dispatch.h body).
template <class T>
struct Rows {
  const T* dy;
  const T* y;
  T* dx;
  int64_t len;
};

template <class T>
[[gnu::always_inline]] inline void rows(const Rows<T>& a, int64_t r0, int64_t r1) {
  const int64_t len = a.len;
  for (int64_t r = r0; r < r1; ++r) {
    const T* g = a.dy + r * len;
    const T* p = a.y + r * len;
    T* out = a.dx + r * len;
    double dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t k = 0; k < len; ++k) dot += static_cast<double>(g[k]) * static_cast<double>(p[k]);
#pragma omp simd
    for (int64_t k = 0; k < len; ++k)
      out[k] = static_cast<T>(static_cast<double>(p[k]) * (static_cast<double>(g[k]) - dot));
  }
}

class SoftmaxGrad final : public PairGradKernel<SoftmaxGrad> {
 public:
  using PairGradKernel::PairGradKernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    check_pair(ctx, "Y");
    const Shape& s = ctx.shape(0);
    const int64_t rank = static_cast<int64_t>(s.size());
    const int64_t axis = rank == 0 ? 0 : normalize_axis(node_.attr_int("axis", -1), rank);
    outer_ = inner_ = 1;
    len_ = rank == 0 ? 1 : s[static_cast<size_t>(axis)];
    for (int64_t i = 0; i < rank; ++i) {
      if (i < axis) outer_ *= s[static_cast<size_t>(i)];
      if (i > axis) inner_ *= s[static_cast<size_t>(i)];
    }
    return {{ctx.dtype(0), s}};
  }

  // Per slice [len, inner] of the view [outer, len, inner]: the dot products along the axis in
  // double, then dX. Each element of dY and Y is read before dX (which may be dY) is written. The
  // last axis (inner 1: attention scores) runs rows at the CPU's vector width (simd_dispatch.h).
  template <class T>
  void run(ComputeContext& ctx) {
    const T* dy = ctx.input(0).data<T>();
    const T* y = ctx.input(1).data<T>();
    T* dx = ctx.output(0).data<T>();
    const int64_t len = len_, inner = inner_;
    parallel_for(outer_, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, len * inner)), [&](int64_t b, int64_t e) {
      const int64_t at = b * len * inner;
      if (inner == 1) return simd::run_best<rows<T>>(Rows<T>{dy + at, y + at, dx + at, len}, e - b);
      std::vector<double> dot(static_cast<size_t>(inner));
      for (int64_t o = b; o < e; ++o) {
        const int64_t first = o * len * inner;
        slice(dy + first, y + first, dx + first, len, inner, dot.data());
      }
    });
  }

  template <class T>
  static void slice(const T* g, const T* p, T* out, int64_t len, int64_t inner, double* dot) {
    std::fill(dot, dot + inner, 0.0);
    for (int64_t k = 0; k < len; ++k)
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i)
        dot[i] += static_cast<double>(g[k * inner + i]) * static_cast<double>(p[k * inner + i]);
    for (int64_t k = 0; k < len; ++k)
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = k * inner + i;
        out[at] = static_cast<T>(static_cast<double>(p[at]) * (static_cast<double>(g[at]) - dot[i]));
      }
  }

 private:
  int64_t outer_ = 1, len_ = 1, inner_ = 1;
};

// dX = scale * Y (dY - sum of dY Y) where MaskedSoftmax scaled X, 0 where it filled.
class MaskedSoftmaxGrad final : public PairGradKernel<MaskedSoftmaxGrad> {
 public:
  using PairGradKernel::PairGradKernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    check_pair(ctx, "Y");
    const Shape out = masked_softmax::output_shape("MaskedSoftmaxGrad", ctx.input(1), ctx.input(2));
    if (out != ctx.shape(1))
      throw ShapeError(fmt::format("MaskedSoftmaxGrad: cond {} does not broadcast to Y {}", to_string(ctx.shape(2)),
                                   to_string(ctx.shape(1))));
    rows_ = masked_softmax::Rows(out, out, ctx.shape(2));
    attrs_ = masked_softmax::attrs_of(node_);
    return {{ctx.dtype(0), out}};
  }

  template <class T>
  void run(ComputeContext& ctx) {
    const T* dy = ctx.input(0).data<T>();
    const T* y = ctx.input(1).data<T>();
    const bool* cond = ctx.input(2).data<bool>();
    T* dx = ctx.output(0).data<T>();
    const int64_t len = rows_.len(), cs = rows_.cond_step();
    const double scale = attrs_.scale;
    const bool where = attrs_.fill_where;
    parallel_for(rows_.rows(), std::max<int64_t>(1, 16384 / std::max<int64_t>(1, len)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T *g = dy + r * len, *p = y + r * len;
        const bool* c = cond + rows_.cond_offset(r);
        T* out = dx + r * len;
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t k = 0; k < len; ++k) dot += static_cast<double>(g[k]) * static_cast<double>(p[k]);
        for (int64_t k = 0; k < len; ++k)
          out[k] = c[k * cs] == where
                       ? T(0)
                       : static_cast<T>(scale * static_cast<double>(p[k]) * (static_cast<double>(g[k]) - dot));
      }
    });
  }

 private:
  masked_softmax::Rows rows_;
  masked_softmax::Attrs attrs_;
};

const KernelRegistrar reg_masked({kKilnDomain, "MaskedSoftmaxGrad", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                                 [](const Node& n) { return std::make_unique<MaskedSoftmaxGrad>(n); });
const OpDocRegistrar doc_masked(
    {kKilnDomain,
     "MaskedSoftmaxGrad",
     "The gradient of ai.kiln.MaskedSoftmax with respect to X (before X's broadcast is summed back), from its "
     "output.",
     {"dY: the gradient of MaskedSoftmax's output", "Y: MaskedSoftmax's output", "cond: its mask"},
     {"dX: dY's shape and dtype"},
     "attributes scale, fill_where as MaskedSoftmax's: dX = 0 where cond == fill_where, else scale * Y (dY - sum "
     "along the last axis of dY Y), the sums in double"});

const KernelRegistrar reg({kKilnDomain, "SoftmaxGrad", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                          [](const Node& n) { return std::make_unique<SoftmaxGrad>(n); });
const OpDocRegistrar doc({kKilnDomain,
                          "SoftmaxGrad",
                          "The gradient of Softmax (opset 13 and later: one axis, attribute axis as Softmax's), "
                          "from its output.",
                          {"dY: the gradient of Softmax's output", "Y: Softmax's output"},
                          {"dX: the gradient of Softmax's input, dY's shape and dtype"},
                          "dX = Y (dY - sum over the axis of dY Y), the sums in double"});

}  // namespace
}  // namespace kiln

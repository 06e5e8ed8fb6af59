// ai.kiln.ResizeGrad, the gradient of Resize (resize.cpp) with respect to its input X.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/int_values.h"
#include "kernels/cpu/resize_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using resize::AxisMap;
using resize::Coord;
using resize::ResizeBase;

// ai.kiln.ResizeGrad(dY, shape, roi, scales, sizes): the transpose of Resize's linear map. Resize
// is separable (one pass per axis with fixed taps and weights), so its gradient is one transposed
// pass per axis: each output coordinate's gradient goes back to its taps, times their weights.
// This serves every mode (nearest, linear, cubic) and coordinate transformation; positions outside
// a tf_crop_and_resize crop take the extrapolation value, so their gradient is dropped.
class ResizeGradKernel : public ResizeBase {
 public:
  using ResizeBase::ResizeBase;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape in = int64_values(ctx.value(1), "shape");
    const Shape out = geometry(ctx, in, ctx.dtype(0), 2);
    if (ctx.shape(0) != out)
      throw ShapeError(fmt::format("dY {} must have Resize's output shape {} (of input {})", to_string(ctx.shape(0)),
                                   to_string(out), to_string(in)));
    return {{ctx.dtype(0), in, ctx.input(0).dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    Tensor& dx = ctx.output(0);
    if (!is_floating(dy.dtype())) throw TypeError(fmt::format("ResizeGrad needs a float dY, got {}", dy.describe()));
    if (dx.numel() == 0) return;
    const Shape& xs = dx.shape();
    const Shape& ys = dy.shape();
    const std::vector<AxisMap> maps = axis_maps(ctx, 2, xs, ys);
    std::vector<double> buf(static_cast<size_t>(dy.numel()));
    visit_dtype(dy.dtype(), [&](auto tag) {
      const auto* p = static_cast<const decltype(tag)*>(dy.raw_data());
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = to_double(p[i]);
    });
    if (attrs_.coord == Coord::TfCropAndResize) {
      Shape pos(ys.size(), 0);
      for (size_t i = 0; i < buf.size(); ++i) {
        for (size_t d = 0; d < ys.size(); ++d)
          if (maps[d].outside[pos[d]]) buf[i] = 0;
        for (size_t d = ys.size(); d-- > 0;) {
          if (++pos[d] < ys[d]) break;
          pos[d] = 0;
        }
      }
    }
    Shape cur = ys;
    for (size_t d = cur.size(); d-- > 0;) {
      const AxisMap& m = maps[d];
      if (m.identity) continue;
      const int64_t outer = numel(Shape(cur.begin(), cur.begin() + static_cast<int64_t>(d)));
      const int64_t inner = numel(Shape(cur.begin() + static_cast<int64_t>(d) + 1, cur.end()));
      std::vector<double> next(static_cast<size_t>(outer * m.in * inner), 0.0);
      // Threads own outer slices: taps of different output coordinates may coincide.
      parallel_for(outer, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, m.out * inner)), [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o)
          for (int64_t c = 0; c < m.out; ++c) {
            const double* src = &buf[static_cast<size_t>((o * m.out + c) * inner)];
            for (int64_t t = 0; t < m.n; ++t) {
              const double w = m.weights[c * m.n + t];
              if (w == 0) continue;
              double* dst = &next[static_cast<size_t>((o * m.in + m.taps[c * m.n + t]) * inner)];
              for (int64_t i = 0; i < inner; ++i) dst[i] += w * src[i];
            }
          }
      });
      buf.swap(next);
      cur[d] = m.in;
    }
    visit_dtype(dx.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = static_cast<T*>(dx.raw_data());
      for (size_t i = 0; i < buf.size(); ++i) p[i] = from_double<T>(buf[i]);
    });
  }
};

const KernelRegistrar reg_resize_grad({kKilnDomain, "ResizeGrad", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                                      [](const Node& n) { return std::make_unique<ResizeGradKernel>(n); });
const OpDocRegistrar doc_resize_grad(
    {kKilnDomain,
     "ResizeGrad",
     "The gradient of Resize with respect to its input X, for every mode Resize supports.",
     {"dY: the gradient of Resize's output", "shape: int64 [r], the shape of X",
      "roi, scales, sizes: Resize's inputs (omitted or empty as in Resize)"},
     {"dX: the gradient of X, of the given shape"},
     "attributes as Resize's. Resize is Y = (A_0 x A_1 x ... x A_{r-1}) X with one interpolation matrix A_d per "
     "axis (taps and weights of the mode and coordinate transformation); dX = (A_0^T x ... x A_{r-1}^T) dY, "
     "with dY zeroed first where tf_crop_and_resize extrapolates"});

}  // namespace
}  // namespace kiln

// ai.kiln.GridSampleGrad: the gradients of GridSample (grid_sample.cpp) with respect to X (each
// output's gradient spread over the taps it read, by their weights) and to the grid (the taps'
// values times the weights' derivatives along x and y; zero for nearest, and where border /
// reflection padding clamps the coordinate), as torch.nn.functional.grid_sample's backward.
#include <fmt/format.h>

#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/grid_sample_common.h"
#include "kernels/cpu/visit_float.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

class GridSampleGradKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta &dy = ctx.input(0), &x = ctx.input(1), &g = ctx.input(2);
    settings_ = grid::read_settings(node_, "GridSampleGrad");
    if (x.shape.size() != 4 || g.shape.size() != 4 || g.shape[3] != 2 || g.shape[0] != x.shape[0] ||
        dy.shape != Shape{x.shape[0], x.shape[1], g.shape[1], g.shape[2]} || dy.dtype != x.dtype || g.dtype != x.dtype)
      throw ShapeError(fmt::format("GridSampleGrad: dY {}, X {} and grid {} do not fit GridSample's shapes",
                                   dy.describe(), x.describe(), g.describe()));
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}, TensorMeta{g.dtype, g.shape, g.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    visit_float32_64(ctx.input(1).dtype(), "GridSampleGrad", [&](auto tag) { run<decltype(tag)>(ctx); });
  }

 private:
  template <class T>
  void run(ComputeContext& ctx) {
    const Tensor &dy = ctx.input(0), &x = ctx.input(1), &g = ctx.input(2);
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), points = g.dim(1) * g.dim(2);
    const T* pdy = dy.data<T>();
    const T* px = x.data<T>();
    const T* pg = g.data<T>();
    T* pdx = ctx.outputs[0] && ctx.outputs[0]->defined() ? ctx.output(0).data<T>() : nullptr;
    T* pdg = ctx.outputs.size() > 1 && ctx.outputs[1] && ctx.outputs[1]->defined() ? ctx.output(1).data<T>() : nullptr;
    // One batch item per task: its dX planes are written by that task only.
    parallel_for(n, 1, [&](int64_t b, int64_t e) {
      std::vector<double> dx(static_cast<size_t>(c * h * w));
      for (int64_t ni = b; ni < e; ++ni) {
        std::fill(dx.begin(), dx.end(), 0.0);
        for (int64_t o = 0; o < points; ++o) {
          const int64_t p = ni * points + o;
          const grid::Taps t = grid::taps_at(double(pg[2 * p]), double(pg[2 * p + 1]), h, w, settings_);
          double gx = 0, gy = 0;
          for (int64_t ci = 0; ci < c; ++ci) {
            const double d = double(pdy[(ni * c + ci) * points + o]);
            const T* plane = px + (ni * c + ci) * h * w;
            for (int k = 0; k < t.count; ++k) {
              const grid::Tap& tap = t.taps[size_t(k)];
              if (tap.index < 0) continue;
              dx[size_t(ci * h * w + tap.index)] += tap.w * d;
              const double v = double(plane[tap.index]) * d;
              gx += tap.dgx * v;
              gy += tap.dgy * v;
            }
          }
          if (pdg) {
            pdg[2 * p] = T(gx);
            pdg[2 * p + 1] = T(gy);
          }
        }
        if (pdx)
          for (int64_t i = 0; i < c * h * w; ++i) pdx[ni * c * h * w + i] = T(dx[size_t(i)]);
      }
    });
  }

  grid::Settings settings_;
};

const KernelRegistrar grid_sample_grad_reg(
    {kKilnDomain, "GridSampleGrad", 1, kMaxOpset, {DType::Float32, DType::Float64}},
    [](const Node& n) { return std::make_unique<GridSampleGradKernel>(n); });
const OpDocRegistrar grid_sample_grad_doc(
    {kKilnDomain,
     "GridSampleGrad",
     "Gradients of GridSample (2-D) with respect to X and the grid; attributes are the GridSample's (mode, "
     "padding_mode, align_corners).",
     {"dY: gradient of the GridSample output [N, C, H_out, W_out]", "X: the GridSample input [N, C, H, W]",
      "grid: the sampling grid [N, H_out, W_out, 2]"},
     {"dX: gradient of X", "dgrid: gradient of the grid"},
     "each output point reads taps X[t] with weights w_t(grid): dX[t] += w_t dY; dgrid = sum_c sum_t X[t] dY "
     "dw_t/dgrid "
     "(zero for nearest and where border / reflection padding clamps the coordinate)"});

}  // namespace
}  // namespace kiln

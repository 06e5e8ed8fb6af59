// ai.kiln.MaxRoiPoolGrad: the gradient of MaxRoiPool (max_roi_pool.cpp) with respect to X: each
// output's gradient goes to the input pixel that was its bin's maximum (the first on ties; none for
// an empty bin), summed where bins or regions overlap, as torchvision.ops.roi_pool's backward.
#include <fmt/format.h>

#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/max_roi_pool_common.h"
#include "kernels/cpu/visit_float.h"

namespace kiln {
namespace {

class MaxRoiPoolGradKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    settings_ = roi_pool::read_settings(node_, "MaxRoiPoolGrad");
    roi_pool::check_shapes("MaxRoiPoolGrad", ctx.input(1), ctx.input(2));
    const TensorMeta &dy = ctx.input(0), &x = ctx.input(1);
    const Shape want{ctx.shape(2)[0], x.shape[1], settings_.out_h, settings_.out_w};
    if (dy.shape != want || dy.dtype != x.dtype)
      throw ShapeError(
          fmt::format("MaxRoiPoolGrad: dY {} must be {}{}", dy.describe(), dtype_name(x.dtype), to_string(want)));
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    visit_float32_64(ctx.input(1).dtype(), "MaxRoiPoolGrad", [&](auto tag) { run<decltype(tag)>(ctx); });
  }

 private:
  template <class T>
  void run(ComputeContext& ctx) {
    const Tensor &dy = ctx.input(0), &x = ctx.input(1), &rois = ctx.input(2);
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), r = rois.dim(0);
    const int64_t oh = settings_.out_h, ow = settings_.out_w;
    const T *pdy = dy.data<T>(), *px = x.data<T>(), *pr = rois.data<T>();
    const std::vector<int64_t> batch = roi_pool::check_regions("MaxRoiPoolGrad", pr, r, settings_, n);
    std::vector<roi_pool::Window> windows(static_cast<size_t>(r * oh * ow));
    for (int64_t k = 0; k < r * oh * ow; ++k) {
      const int64_t ri = k / (oh * ow);
      const T corners[4] = {pr[ri * 5 + 1], pr[ri * 5 + 2], pr[ri * 5 + 3], pr[ri * 5 + 4]};
      windows[size_t(k)] = roi_pool::window<T>(settings_, corners, (k / ow) % oh, k % ow, h, w);
    }
    T* pdx = ctx.output(0).data<T>();
    std::fill(pdx, pdx + x.numel(), T(0));
    // One channel per task: each writes only its own planes.
    parallel_for(c, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t ci = c0; ci < c1; ++ci)
        for (int64_t k = 0; k < r * oh * ow; ++k) {
          const int64_t ri = k / (oh * ow), plane_at = (batch[size_t(ri)] * c + ci) * h * w;
          const int64_t at = roi_pool::argmax(px + plane_at, windows[size_t(k)], w);
          if (at >= 0) pdx[plane_at + at] += pdy[(ri * c + ci) * oh * ow + k % (oh * ow)];
        }
    });
  }

  roi_pool::Settings settings_;
};

const KernelRegistrar max_roi_pool_grad_reg(
    {kKilnDomain, "MaxRoiPoolGrad", 1, kMaxOpset, {DType::Float32, DType::Float64}},
    [](const Node& n) { return std::make_unique<MaxRoiPoolGradKernel>(n); });
const OpDocRegistrar max_roi_pool_grad_doc(
    {kKilnDomain,
     "MaxRoiPoolGrad",
     "Gradient of MaxRoiPool with respect to X; attributes are the MaxRoiPool's (pooled_shape, spatial_scale).",
     {"dY: gradient of the MaxRoiPool output [R, C, pooled_h, pooled_w]", "X: the MaxRoiPool input [N, C, H, W]",
      "rois: [R, 5] (batch index, x1, y1, x2, y2)"},
     {"dX: gradient of X"},
     "dX[argmax of each bin] += dY[bin] (the first maximum on ties; an empty bin sends nothing)"});

}  // namespace
}  // namespace kiln

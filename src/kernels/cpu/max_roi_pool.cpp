// MaxRoiPool: Y[r, c, ph, pw] = the maximum of X[rois[r, 0], c] over the window of bin (ph, pw) of
// region rois[r, 1:5] = (x1, y1, x2, y2) (max_roi_pool_common.h; 0 for an empty window). Its
// gradient, ai.kiln.MaxRoiPoolGrad, is in max_roi_pool_grad.cpp.
#include <fmt/format.h>

#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/max_roi_pool_common.h"
#include "kernels/cpu/visit_float.h"

namespace kiln::roi_pool {

Settings read_settings(const Node& node, const char* op) {
  if (!node.has_attr("pooled_shape")) throw InvalidModel(fmt::format("{}: attribute 'pooled_shape' is required", op));
  const std::vector<int64_t> pooled = node.attr_ints("pooled_shape");
  if (pooled.size() != 2 || pooled[0] < 1 || pooled[1] < 1)
    throw InvalidModel(
        fmt::format("{}: pooled_shape {} must be two positive ints [height, width]", op, to_string(pooled)));
  Settings s;
  s.out_h = pooled[0];
  s.out_w = pooled[1];
  s.spatial_scale = node.attr_float("spatial_scale", 1.0f);
  if (!(s.spatial_scale > 0) || !std::isfinite(s.spatial_scale))
    throw InvalidModel(fmt::format("{}: spatial_scale {} must be positive", op, s.spatial_scale));
  return s;
}

void check_shapes(const char* op, const TensorMeta& x, const TensorMeta& rois) {
  if (x.shape.size() != 4 || rois.shape.size() != 2 || rois.shape[1] != 5)
    throw ShapeError(fmt::format("{}: X {} must be [N, C, H, W] and rois {} [R, 5] (batch index, x1, y1, x2, y2)", op,
                                 x.describe(), rois.describe()));
  if (rois.dtype != x.dtype)
    throw TypeError(
        fmt::format("{}: rois ({}) must have X's dtype ({})", op, dtype_name(rois.dtype), dtype_name(x.dtype)));
}

int64_t check_region(const char* op, const double row[5], const Settings& s, int64_t r, int64_t n) {
  if (!(row[0] > -1.0 && row[0] < static_cast<double>(n)))
    throw InvalidModel(fmt::format("{}: rois[{}, 0] = {} is not a batch index of X (batch size {})", op, r, row[0], n));
  for (int k = 1; k < 5; ++k)
    if (const double v = row[k] * s.spatial_scale; !(std::abs(v) <= 1e15))
      throw InvalidModel(
          fmt::format("{}: rois[{}] = ({}, {}, {}, {}) has a corner that is not a pixel position "
                      "(times spatial_scale {})",
                      op, r, row[1], row[2], row[3], row[4], s.spatial_scale));
  return static_cast<int64_t>(row[0]);
}

}  // namespace kiln::roi_pool

namespace kiln {
namespace {

class MaxRoiPoolKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    settings_ = roi_pool::read_settings(node_, "MaxRoiPool");
    roi_pool::check_shapes("MaxRoiPool", ctx.input(0), ctx.input(1));
    const TensorMeta& x = ctx.input(0);
    return {TensorMeta{x.dtype,
                       {ctx.shape(1)[0], x.shape[1], settings_.out_h, settings_.out_w},
                       x.dynamic || ctx.input(1).dynamic,
                       Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    visit_float(ctx.input(0).dtype(), "MaxRoiPool", [&](auto tag) { run<decltype(tag)>(ctx); });
  }

 private:
  template <class T>
  void run(ComputeContext& ctx) {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const Tensor &x = ctx.input(0), &rois = ctx.input(1);
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), r = rois.dim(0);
    const int64_t oh = settings_.out_h, ow = settings_.out_w;
    const T *px = x.data<T>(), *pr = rois.data<T>();
    const std::vector<int64_t> batch = roi_pool::check_regions("MaxRoiPool", pr, r, settings_, n);
    T* py = ctx.output(0).data<T>();
    parallel_for(r * oh * ow, 1, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        const int64_t ri = k / (oh * ow), ph = (k / ow) % oh, pw = k % ow;
        const A corners[4] = {A(to_double(pr[ri * 5 + 1])), A(to_double(pr[ri * 5 + 2])), A(to_double(pr[ri * 5 + 3])),
                              A(to_double(pr[ri * 5 + 4]))};
        const roi_pool::Window win = roi_pool::window<A>(settings_, corners, ph, pw, h, w);
        for (int64_t ci = 0; ci < c; ++ci) {
          const T* plane = px + (batch[size_t(ri)] * c + ci) * h * w;
          const int64_t at = roi_pool::argmax(plane, win, w);
          double v = at >= 0 ? to_double(plane[at]) : 0.0;
          if (at < 0 && !win.empty()) v = -static_cast<double>(std::numeric_limits<float>::max());
          py[((ri * c + ci) * oh + ph) * ow + pw] = from_double<T>(v);
        }
      }
    });
  }

  roi_pool::Settings settings_;
};

const KernelRegistrar max_roi_pool_reg(
    {"", "MaxRoiPool", 1, kMaxOpset, {DType::Float32, DType::Float64, DType::Float16}},
    [](const Node& n) { return std::make_unique<MaxRoiPoolKernel>(n); });

}  // namespace
}  // namespace kiln

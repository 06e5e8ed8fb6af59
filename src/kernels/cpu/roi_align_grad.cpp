// ai.kiln.RoiAlignGrad: the gradient of RoiAlign (roi_align.cpp) with respect to X. "avg" spreads
// each bin's gradient over its samples' taps by weight / sample count; "max" sends it to the tap
// whose weighted value was the bin's maximum (the first one on ties), with that tap's weight.
#include <fmt/format.h>

#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/roi_align_common.h"
#include "kernels/cpu/visit_float.h"

namespace kiln {
namespace {

class RoiAlignGradKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    settings_ = roi::read_settings(node_, 16, "RoiAlignGrad");
    roi::check_shapes("RoiAlignGrad", ctx.input(1), ctx.input(2), ctx.input(3));
    const TensorMeta &dy = ctx.input(0), &x = ctx.input(1);
    const Shape want{ctx.shape(2)[0], x.shape[1], settings_.out_h, settings_.out_w};
    if (dy.shape != want || dy.dtype != x.dtype)
      throw ShapeError(fmt::format("RoiAlignGrad: dY {}{} must be {}{}", dtype_name(dy.dtype), to_string(dy.shape),
                                   dtype_name(x.dtype), to_string(want)));
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    visit_float32_64(ctx.input(1).dtype(), "RoiAlignGrad", [&](auto tag) { run<decltype(tag)>(ctx); });
  }

 private:
  template <class T>
  void run(ComputeContext& ctx) {
    const Tensor &dy = ctx.input(0), &x = ctx.input(1), &rois = ctx.input(2), &bi = ctx.input(3);
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), r = rois.dim(0);
    const int64_t oh = settings_.out_h, ow = settings_.out_w;
    const T *pdy = dy.data<T>(), *px = x.data<T>(), *pr = rois.data<T>();
    const int64_t* pb = bi.data<int64_t>();
    for (int64_t i = 0; i < r; ++i) {
      const double roi[4] = {double(pr[i * 4]), double(pr[i * 4 + 1]), double(pr[i * 4 + 2]), double(pr[i * 4 + 3])};
      roi::check_region("RoiAlignGrad", settings_, pb[i], roi, i, n);
    }
    // Every bin's samples once (they do not depend on the channel).
    std::vector<std::vector<roi::Sample>> samples(static_cast<size_t>(r * oh * ow));
    for (int64_t k = 0; k < r * oh * ow; ++k) {
      const int64_t ri = k / (oh * ow);
      const double roi[4] = {double(pr[ri * 4]), double(pr[ri * 4 + 1]), double(pr[ri * 4 + 2]),
                             double(pr[ri * 4 + 3])};
      samples[size_t(k)] = roi::bin_samples(settings_, roi, (k / ow) % oh, k % ow, h, w);
    }
    T* pdx = ctx.output(0).data<T>();
    std::fill(pdx, pdx + x.numel(), T(0));
    // One channel per task: each writes only its own planes.
    parallel_for(c, 1, [&](int64_t c0, int64_t c1) {
      std::vector<double> acc(static_cast<size_t>(n * h * w));
      for (int64_t ci = c0; ci < c1; ++ci) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t k = 0; k < r * oh * ow; ++k) {
          const int64_t ri = k / (oh * ow);
          const double d = double(pdy[(ri * c + ci) * oh * ow + k % (oh * ow)]);
          const std::vector<roi::Sample>& ss = samples[size_t(k)];
          double* a = acc.data() + pb[ri] * h * w;
          const T* plane = px + (pb[ri] * c + ci) * h * w;
          if (!settings_.max_mode) {
            const double scale = d / double(std::max<size_t>(ss.size(), 1));
            for (const roi::Sample& s : ss)
              for (size_t t = 0; t < 4; ++t) a[s.index[t]] += s.w[t] * scale;
            continue;
          }
          const roi::Sample* best = nullptr;
          size_t best_t = 0;
          double best_v = 0;
          for (const roi::Sample& s : ss)
            for (size_t t = 0; t < 4; ++t) {
              const double v = s.w[t] * double(plane[s.index[t]]);
              if (!best || v > best_v) {
                best = &s;
                best_t = t;
                best_v = v;
              }
            }
          if (best) a[best->index[best_t]] += best->w[best_t] * d;
        }
        for (int64_t b = 0; b < n; ++b)
          for (int64_t i = 0; i < h * w; ++i) pdx[(b * c + ci) * h * w + i] = T(acc[size_t(b * h * w + i)]);
      }
    });
  }

  roi::Settings settings_;
};

const KernelRegistrar roi_align_grad_reg({kKilnDomain, "RoiAlignGrad", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                                         [](const Node& n) { return std::make_unique<RoiAlignGradKernel>(n); });
const OpDocRegistrar roi_align_grad_doc(
    {kKilnDomain,
     "RoiAlignGrad",
     "Gradient of RoiAlign with respect to X; attributes are the RoiAlign's (mode, output_height, output_width, "
     "sampling_ratio, spatial_scale, coordinate_transformation_mode: give it explicitly, the default here is "
     "half_pixel).",
     {"dY: gradient of the RoiAlign output [R, C, output_height, output_width]", "X: the RoiAlign input [N, C, H, W]",
      "rois: [R, 4]", "batch_indices: int64 [R]"},
     {"dX: gradient of X"},
     "avg: dX[tap] += w_tap dY / samples for each sample's four taps; max: the bin's maximal weighted tap gets "
     "w_tap dY"});

}  // namespace
}  // namespace kiln

// RoiAlign: Y[r, c, ph, pw] = the average (or, mode "max", the maximum) of bilinear samples of
// X[batch_indices[r], c] over bin (ph, pw) of region rois[r] = (x1, y1, x2, y2) scaled by
// spatial_scale (roi_align_common.h). Its gradient, ai.kiln.RoiAlignGrad, is in roi_align_grad.cpp.
#include <fmt/format.h>

#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/roi_align_common.h"
#include "kernels/cpu/visit_float.h"

namespace kiln::roi {
namespace {}  // namespace

Settings read_settings(const Node& node, int64_t opset, const char* op) {
  Settings s;
  const std::string mode = node.attr_string("mode", "avg");
  if (mode != "avg" && mode != "max") throw InvalidModel(fmt::format("{}: mode '{}' must be 'avg' or 'max'", op, mode));
  s.max_mode = mode == "max";
  s.out_h = node.attr_int("output_height", 1);
  s.out_w = node.attr_int("output_width", 1);
  s.sampling_ratio = node.attr_int("sampling_ratio", 0);
  s.spatial_scale = node.attr_float("spatial_scale", 1.0f);
  if (s.out_h < 1 || s.out_w < 1 || s.sampling_ratio < 0)
    throw InvalidModel(fmt::format("{}: output_height {}, output_width {} must be positive and sampling_ratio {} >= 0",
                                   op, s.out_h, s.out_w, s.sampling_ratio));
  const std::string ctm =
      node.attr_string("coordinate_transformation_mode", opset >= 16 ? "half_pixel" : "output_half_pixel");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    throw InvalidModel(
        fmt::format("{}: coordinate_transformation_mode '{}' must be 'half_pixel' or "
                    "'output_half_pixel'",
                    op, ctm));
  s.half_pixel = ctm == "half_pixel";
  return s;
}

void check_shapes(const char* op, const TensorMeta& x, const TensorMeta& rois, const TensorMeta& batch_indices) {
  if (x.shape.size() != 4 || rois.shape.size() != 2 || rois.shape[1] != 4 ||
      batch_indices.shape != Shape{rois.shape[0]})
    throw ShapeError(fmt::format("{}: X {} must be [N, C, H, W], rois {} [R, 4] and batch_indices {} [R]", op,
                                 x.describe(), rois.describe(), batch_indices.describe()));
  if (rois.dtype != x.dtype)
    throw TypeError(fmt::format("{}: rois {} must have X's dtype ({})", op, rois.describe(), x.describe()));
  if (batch_indices.dtype != DType::Int64)
    throw TypeError(fmt::format("{}: batch_indices {} must be int64", op, batch_indices.describe()));
}

void check_region(const char* op, const Settings& s, int64_t batch_index, const double roi[4], int64_t r, int64_t n) {
  if (batch_index < 0 || batch_index >= n)
    throw InvalidModel(fmt::format("{}: batch_indices[{}] = {} is outside [0, {})", op, r, batch_index, n));
  for (int k = 0; k < 4; ++k)
    if (!(std::abs(roi[k] * s.spatial_scale) <= 1e15))
      throw InvalidModel(
          fmt::format("{}: rois[{}] = ({}, {}, {}, {}) has a corner that is not a pixel position "
                      "(times spatial_scale {})",
                      op, r, roi[0], roi[1], roi[2], roi[3], s.spatial_scale));
}

std::vector<Sample> bin_samples(const Settings& s, const double* roi, int64_t ph, int64_t pw, int64_t h, int64_t w) {
  const double offset = s.half_pixel ? 0.5 : 0.0;
  const double x1 = roi[0] * s.spatial_scale - offset, y1 = roi[1] * s.spatial_scale - offset;
  double rw = roi[2] * s.spatial_scale - offset - x1, rh = roi[3] * s.spatial_scale - offset - y1;
  if (!s.half_pixel) {
    rw = std::max(rw, 1.0);
    rh = std::max(rh, 1.0);
  }
  const double bh = rh / double(s.out_h), bw = rw / double(s.out_w);
  const int64_t gh = s.sampling_ratio > 0 ? s.sampling_ratio : static_cast<int64_t>(std::ceil(rh / double(s.out_h)));
  const int64_t gw = s.sampling_ratio > 0 ? s.sampling_ratio : static_cast<int64_t>(std::ceil(rw / double(s.out_w)));
  std::vector<Sample> out;
  for (int64_t iy = 0; iy < gh; ++iy)
    for (int64_t ix = 0; ix < gw; ++ix) {
      double y = y1 + double(ph) * bh + (double(iy) + 0.5) * bh / double(gh);
      double x = x1 + double(pw) * bw + (double(ix) + 0.5) * bw / double(gw);
      Sample smp;
      if (y < -1.0 || y > double(h) || x < -1.0 || x > double(w)) {
        out.push_back(smp);
        continue;
      }
      y = std::max(y, 0.0);
      x = std::max(x, 0.0);
      auto yl = static_cast<int64_t>(y), xl = static_cast<int64_t>(x);
      int64_t yh = yl + 1, xh = xl + 1;
      if (yl >= h - 1) {
        yh = yl = h - 1;
        y = double(yl);
      }
      if (xl >= w - 1) {
        xh = xl = w - 1;
        x = double(xl);
      }
      const double ly = y - double(yl), lx = x - double(xl), hy = 1 - ly, hx = 1 - lx;
      smp.index = {yl * w + xl, yl * w + xh, yh * w + xl, yh * w + xh};
      smp.w = {hy * hx, hy * lx, ly * hx, ly * lx};
      out.push_back(smp);
    }
  return out;
}

}  // namespace kiln::roi

namespace kiln {
namespace {

class RoiAlignKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    settings_ = roi::read_settings(node_, ctx.opset, "RoiAlign");
    roi::check_shapes("RoiAlign", ctx.input(0), ctx.input(1), ctx.input(2));
    const TensorMeta& x = ctx.input(0);
    return {TensorMeta{x.dtype, {ctx.shape(1)[0], x.shape[1], settings_.out_h, settings_.out_w}, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor &x = ctx.input(0), &rois = ctx.input(1), &bi = ctx.input(2);
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), r = rois.dim(0);
    const int64_t bins = settings_.out_h * settings_.out_w;
    visit_float(x.dtype(), "RoiAlign", [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.data<T>();
      const T* pr = rois.data<T>();
      const int64_t* pb = bi.data<int64_t>();
      T* py = ctx.output(0).data<T>();
      for (int64_t i = 0; i < r; ++i) {
        const double roi[4] = {to_double(pr[i * 4]), to_double(pr[i * 4 + 1]), to_double(pr[i * 4 + 2]),
                               to_double(pr[i * 4 + 3])};
        roi::check_region("RoiAlign", settings_, pb[i], roi, i, n);
      }
      parallel_for(r * bins, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t k = b0; k < b1; ++k) {
          const int64_t ri = k / bins, ph = (k % bins) / settings_.out_w, pw = k % settings_.out_w;
          const double roi[4] = {to_double(pr[ri * 4]), to_double(pr[ri * 4 + 1]), to_double(pr[ri * 4 + 2]),
                                 to_double(pr[ri * 4 + 3])};
          const std::vector<roi::Sample> samples = roi::bin_samples(settings_, roi, ph, pw, h, w);
          const double count = double(std::max<size_t>(samples.size(), 1));
          for (int64_t ci = 0; ci < c; ++ci) {
            const T* plane = px + (pb[ri] * c + ci) * h * w;
            double acc = 0;
            bool first = true;
            for (const roi::Sample& smp : samples) {
              if (settings_.max_mode) {
                // ONNX Runtime's max: the largest weighted tap of each sample, then of the samples.
                double m = smp.w[0] * to_double(plane[smp.index[0]]);
                for (int t = 1; t < 4; ++t) m = std::max(m, smp.w[size_t(t)] * to_double(plane[smp.index[size_t(t)]]));
                acc = first ? m : std::max(acc, m);
                first = false;
              } else {
                for (int t = 0; t < 4; ++t) acc += smp.w[size_t(t)] * to_double(plane[smp.index[size_t(t)]]);
              }
            }
            py[((ri * c + ci) * settings_.out_h + ph) * settings_.out_w + pw] =
                from_double<T>(settings_.max_mode ? acc : acc / count);
          }
        }
      });
    });
  }

 private:
  roi::Settings settings_;
};

const KernelRegistrar roi_align_reg({"", "RoiAlign", 10, kMaxOpset, {DType::Float32, DType::Float64, DType::Float16}},
                                    [](const Node& n) { return std::make_unique<RoiAlignKernel>(n); });

}  // namespace
}  // namespace kiln

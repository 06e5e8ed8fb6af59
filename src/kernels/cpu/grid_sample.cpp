// GridSample (opset 16, 2-D): Y[n, c, i, j] = X[n, c] sampled at grid[n, i, j] = (x, y) in [-1, 1],
// bilinear, nearest or bicubic, with zeros / border / reflection padding (grid_sample_common.h).
// Its gradient, ai.kiln.GridSampleGrad, is in grid_sample_grad.cpp.
#include <fmt/format.h>

#include "core/parallel.h"
#include "kernels/cpu/grid_sample_common.h"
#include "kernels/cpu/visit_float.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::grid {

Settings read_settings(const Node& node, const char* op) {
  Settings s;
  const std::string mode = node.attr_string("mode", "bilinear");
  if (mode == "bilinear" || mode == "linear") s.mode = Mode::Bilinear;
  else if (mode == "nearest") s.mode = Mode::Nearest;
  else if (mode == "bicubic" || mode == "cubic") s.mode = Mode::Bicubic;
  else throw InvalidModel(fmt::format("{}: mode '{}' must be 'bilinear', 'nearest' or 'bicubic'", op, mode));
  const std::string pad = node.attr_string("padding_mode", "zeros");
  if (pad == "zeros") s.padding = Padding::Zeros;
  else if (pad == "border") s.padding = Padding::Border;
  else if (pad == "reflection") s.padding = Padding::Reflection;
  else throw InvalidModel(fmt::format("{}: padding_mode '{}' must be 'zeros', 'border' or 'reflection'", op, pad));
  s.align_corners = node.attr_int("align_corners", 0) != 0;
  return s;
}

namespace {

// Keys's cubic convolution with A = -0.75 at distance t in [0, 1] and its derivative.
constexpr double kA = -0.75;
double cubic1(double x) { return ((kA + 2) * x - (kA + 3)) * x * x + 1; }
double cubic2(double x) { return ((kA * x - 5 * kA) * x + 8 * kA) * x - 4 * kA; }
double dcubic1(double x) { return (3 * (kA + 2) * x - 2 * (kA + 3)) * x; }
double dcubic2(double x) { return (3 * kA * x - 10 * kA) * x + 8 * kA; }

int64_t index_of(int64_t x, int64_t y, int64_t h, int64_t w) {
  return x >= 0 && x < w && y >= 0 && y < h ? y * w + x : -1;
}

}  // namespace

Taps taps_at(double gx, double gy, int64_t h, int64_t w, const Settings& s) {
  Taps out;
  if (!(std::abs(gx) <= 1e9 && std::abs(gy) <= 1e9)) return out;
  if (s.mode == Mode::Bicubic) {
    const Coord x = unnormalize(gx, w, s.align_corners), y = unnormalize(gy, h, s.align_corners);
    const double x0 = std::floor(x.v), y0 = std::floor(y.v), tx = x.v - x0, ty = y.v - y0;
    const std::array<double, 4> cx{cubic2(tx + 1), cubic1(tx), cubic1(1 - tx), cubic2(2 - tx)};
    const std::array<double, 4> cy{cubic2(ty + 1), cubic1(ty), cubic1(1 - ty), cubic2(2 - ty)};
    const std::array<double, 4> dx{dcubic2(tx + 1), dcubic1(tx), -dcubic1(1 - tx), -dcubic2(2 - tx)};
    const std::array<double, 4> dy{dcubic2(ty + 1), dcubic1(ty), -dcubic1(1 - ty), -dcubic2(2 - ty)};
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) {
        // Padding moves each tap (its weight stays the unpadded one's).
        const Coord px = apply_padding({x0 - 1 + i, 0}, w, s), py = apply_padding({y0 - 1 + j, 0}, h, s);
        const int64_t idx = index_of(static_cast<int64_t>(px.v), static_cast<int64_t>(py.v), h, w);
        out.taps[size_t(out.count++)] = {idx, cx[size_t(i)] * cy[size_t(j)], dx[size_t(i)] * cy[size_t(j)] * x.d,
                                         cx[size_t(i)] * dy[size_t(j)] * y.d};
      }
    return out;
  }
  const Coord x = apply_padding(unnormalize(gx, w, s.align_corners), w, s);
  const Coord y = apply_padding(unnormalize(gy, h, s.align_corners), h, s);
  if (s.mode == Mode::Nearest) {
    out.taps[0] = {index_of(static_cast<int64_t>(std::nearbyint(x.v)), static_cast<int64_t>(std::nearbyint(y.v)), h, w),
                   1, 0, 0};
    out.count = 1;
    return out;
  }
  const double x0 = std::floor(x.v), y0 = std::floor(y.v), tx = x.v - x0, ty = y.v - y0;
  const auto xi = static_cast<int64_t>(x0), yi = static_cast<int64_t>(y0);
  out.taps[0] = {index_of(xi, yi, h, w), (1 - tx) * (1 - ty), -(1 - ty) * x.d, -(1 - tx) * y.d};
  out.taps[1] = {index_of(xi + 1, yi, h, w), tx * (1 - ty), (1 - ty) * x.d, -tx * y.d};
  out.taps[2] = {index_of(xi, yi + 1, h, w), (1 - tx) * ty, -ty * x.d, (1 - tx) * y.d};
  out.taps[3] = {index_of(xi + 1, yi + 1, h, w), tx * ty, ty * x.d, tx * y.d};
  out.count = 4;
  return out;
}

}  // namespace kiln::grid

namespace kiln {
namespace {

class GridSampleKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta &x = ctx.input(0), &g = ctx.input(1);
    settings_ = grid::read_settings(node_, "GridSample");
    if (x.shape.size() != 4 || g.shape.size() != 4 || g.shape[0] != x.shape[0] || g.shape[3] != 2)
      throw ShapeError(fmt::format("GridSample: X {} must be [N, C, H, W] and grid {} [N, H_out, W_out, 2]",
                                   x.describe(), g.describe()));
    if (g.dtype != x.dtype)
      throw TypeError(fmt::format("GridSample: grid {} must have X's dtype ({})", g.describe(), x.describe()));
    return {TensorMeta{x.dtype, {x.shape[0], x.shape[1], g.shape[1], g.shape[2]}, x.dynamic || g.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor &x = ctx.input(0), &g = ctx.input(1);
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), points = g.dim(1) * g.dim(2);
    visit_float(x.dtype(), "GridSample", [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.data<T>();
      const T* pg = g.data<T>();
      T* py = ctx.output(0).data<T>();
      parallel_for(n * points, 64, [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
          const int64_t ni = p / points, o = p % points;
          const grid::Taps t = grid::taps_at(to_double(pg[2 * p]), to_double(pg[2 * p + 1]), h, w, settings_);
          for (int64_t ci = 0; ci < c; ++ci) {
            const T* plane = px + (ni * c + ci) * h * w;
            double acc = 0;
            for (int k = 0; k < t.count; ++k)
              if (t.taps[size_t(k)].index >= 0) acc += t.taps[size_t(k)].w * to_double(plane[t.taps[size_t(k)].index]);
            py[(ni * c + ci) * points + o] = from_double<T>(acc);
          }
        }
      });
    });
  }

 private:
  grid::Settings settings_;
};

const KernelRegistrar grid_sample_reg({"", "GridSample", 16, kMaxOpset, {DType::Float32, DType::Float64}},
                                      [](const Node& n) { return std::make_unique<GridSampleKernel>(n); });

}  // namespace
}  // namespace kiln

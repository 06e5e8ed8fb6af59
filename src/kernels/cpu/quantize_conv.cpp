// ConvInteger and QLinearConv: convolutions of 8-bit data accumulated exactly in int32 (padding
// holds the input's zero point, so it adds nothing), over Conv's geometry (strides, pads,
// auto_pad, dilations, group; 1 to 3 spatial dims). QLinearConv adds its int32 bias and requantizes
// with x_scale * w_scale[m] / y_scale. Plain loops: a reference-speed path, not a tuned kernel.
#include <fmt/format.h>

#include "core/parallel.h"
#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/quantize_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using quant::saturate;
using quant::visit_8bit;

struct Geometry {
  int64_t n = 0, c = 0, m = 0, group = 1;
  std::vector<int64_t> in, out, k, s, d, pb;  // spatial, padded to 3 dims
  Shape y;
};

Geometry geometry(const Node& node, const char* op, const TensorMeta& x, const TensorMeta& w) {
  if (x.shape.size() < 3 || x.shape.size() > 5 || w.shape.size() != x.shape.size())
    throw ShapeError(fmt::format("{}: X {} and W {} must both be [N, C, D1, ...] with 1 to 3 spatial dims", op,
                                 x.describe(), w.describe()));
  Geometry g;
  g.n = x.shape[0];
  g.c = x.shape[1];
  g.m = w.shape[0];
  g.group = node.attr_int("group", 1);
  if (g.group < 1 || g.c % g.group != 0 || g.m % g.group != 0 || w.shape[1] * g.group != g.c)
    throw ShapeError(fmt::format("{}: X {} and W {} do not fit group = {} (W must be [M, C / group, ...])", op,
                                 x.describe(), w.describe(), g.group));
  const Shape spatial(x.shape.begin() + 2, x.shape.end());
  const std::vector<int64_t> kernel(w.shape.begin() + 2, w.shape.end());
  if (node.has_attr("kernel_shape") && node.attr_ints("kernel_shape") != kernel)
    throw ShapeError(fmt::format("{}: kernel_shape [{}] is not W's spatial shape {}", op,
                                 fmt::join(node.attr_ints("kernel_shape"), ", "), w.describe()));
  const dnnl_util::Window win = dnnl_util::make_window(node, spatial, kernel, false);
  const size_t nsp = spatial.size(), off = 3 - nsp;
  g.in.assign(3, 1);
  g.out.assign(3, 1);
  g.k.assign(3, 1);
  g.s.assign(3, 1);
  g.d.assign(3, 1);
  g.pb.assign(3, 0);
  for (size_t i = 0; i < nsp; ++i) {
    g.in[off + i] = spatial[i];
    g.out[off + i] = win.out[i];
    g.k[off + i] = kernel[i];
    g.s[off + i] = win.strides[i];
    g.d[off + i] = win.dilations[i];
    g.pb[off + i] = win.pad_begin[i];
  }
  g.y = {g.n, g.m};
  g.y.insert(g.y.end(), win.out.begin(), win.out.end());
  return g;
}

// A zero point or scale: scalar, or one per output channel (size M) where `per_channel`.
std::vector<double> channel_values(const ComputeContext& ctx, size_t i, int64_t m, bool per_channel, const char* what,
                                   double fallback) {
  if (!ctx.has_input(i)) return {fallback};
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1 && !(per_channel && t.rank() == 1 && t.numel() == m))
    throw ShapeError(fmt::format("{} {} must be a scalar{}", what, t.describe(),
                                 per_channel ? fmt::format(" or hold one value per output channel ({})", m) : ""));
  std::vector<double> v;
  for (int64_t j = 0; j < t.numel(); ++j) v.push_back(t.item_as_double(j));
  return v;
}

inline double pick(const std::vector<double>& v, int64_t m) { return v.size() == 1 ? v[0] : v[size_t(m)]; }

// For each (n, m, output position): emit(flat output index, m, sum of (x - xz)(w - wz[m])).
template <class QX, class QW, class Emit>
void int_conv(const Geometry& g, const QX* x, const QW* w, int32_t xz, const std::vector<double>& wz, Emit&& emit) {
  const int64_t cg = g.c / g.group, mg = g.m / g.group;
  const int64_t in_plane = g.in[0] * g.in[1] * g.in[2], out_plane = g.out[0] * g.out[1] * g.out[2];
  const int64_t taps = g.k[0] * g.k[1] * g.k[2];
  parallel_for(g.n * g.m, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n = p / g.m, m = p % g.m, grp = m / mg;
      const int32_t zw = int32_t(pick(wz, m));
      for (int64_t o = 0; o < out_plane; ++o) {
        const int64_t o0 = o / (g.out[1] * g.out[2]), o1 = (o / g.out[2]) % g.out[1], o2 = o % g.out[2];
        int32_t acc = 0;
        for (int64_t c = 0; c < cg; ++c) {
          const QX* xp = x + (n * g.c + grp * cg + c) * in_plane;
          const QW* wp = w + (m * cg + c) * taps;
          for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
            const int64_t i0 = o0 * g.s[0] - g.pb[0] + k0 * g.d[0];
            if (i0 < 0 || i0 >= g.in[0]) continue;
            for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
              const int64_t i1 = o1 * g.s[1] - g.pb[1] + k1 * g.d[1];
              if (i1 < 0 || i1 >= g.in[1]) continue;
              for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
                const int64_t i2 = o2 * g.s[2] - g.pb[2] + k2 * g.d[2];
                if (i2 < 0 || i2 >= g.in[2]) continue;
                acc += (int32_t(xp[(i0 * g.in[1] + i1) * g.in[2] + i2]) - xz) *
                       (int32_t(wp[(k0 * g.k[1] + k1) * g.k[2] + k2]) - zw);
              }
            }
          }
        }
        emit(p * out_plane + o, m, acc);
      }
    }
  });
}

class ConvIntegerKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    for (size_t i : {size_t(0), size_t(1)})
      visit_8bit(ctx.dtype(i), fmt::format("ConvInteger: {} {}", i ? "w" : "x", ctx.input(i).describe()), [](auto) {});
    g_ = geometry(node_, "ConvInteger", ctx.input(0), ctx.input(1));
    return {TensorMeta{DType::Int32, g_.y, ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const int32_t xz = int32_t(pick(channel_values(ctx, 2, g_.m, false, "ConvInteger: x_zero_point", 0), 0));
    const std::vector<double> wz = channel_values(ctx, 3, g_.m, true, "ConvInteger: w_zero_point", 0);
    int32_t* y = ctx.output(0).data<int32_t>();
    visit_8bit(ctx.input(0).dtype(), "x", [&](auto tx) {
      visit_8bit(ctx.input(1).dtype(), "w", [&](auto tw) {
        int_conv(g_, ctx.input(0).data<decltype(tx)>(), ctx.input(1).data<decltype(tw)>(), xz, wz,
                 [&](int64_t i, int64_t, int32_t acc) { y[i] = acc; });
      });
    });
  }

 private:
  Geometry g_;
};

// (x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point[, B int32]) -> y.
class QLinearConvKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    for (size_t i : {size_t(0), size_t(3), size_t(7)})
      visit_8bit(ctx.dtype(i), fmt::format("QLinearConv: input {} {}", i, ctx.input(i).describe()), [](auto) {});
    g_ = geometry(node_, "QLinearConv", ctx.input(0), ctx.input(3));
    if (ctx.has_input(8) && (ctx.dtype(8) != DType::Int32 || ctx.shape(8) != Shape{g_.m}))
      throw ShapeError(fmt::format("QLinearConv: B {} must be int32[{}]", ctx.input(8).describe(), g_.m));
    return {TensorMeta{ctx.dtype(7), g_.y, ctx.input(0).dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const float xs = float(pick(channel_values(ctx, 1, g_.m, false, "QLinearConv: x_scale", 1), 0));
    const int32_t xz = int32_t(pick(channel_values(ctx, 2, g_.m, false, "QLinearConv: x_zero_point", 0), 0));
    const std::vector<double> ws = channel_values(ctx, 4, g_.m, true, "QLinearConv: w_scale", 1);
    const std::vector<double> wz = channel_values(ctx, 5, g_.m, true, "QLinearConv: w_zero_point", 0);
    const float ys = float(pick(channel_values(ctx, 6, g_.m, false, "QLinearConv: y_scale", 1), 0));
    const float yz = float(pick(channel_values(ctx, 7, g_.m, false, "QLinearConv: y_zero_point", 0), 0));
    const int32_t* bias = ctx.has_input(8) ? ctx.input(8).data<int32_t>() : nullptr;
    Tensor& y = ctx.output(0);
    visit_8bit(ctx.input(0).dtype(), "x", [&](auto tx) {
      visit_8bit(ctx.input(3).dtype(), "w", [&](auto tw) {
        visit_8bit(y.dtype(), "y", [&](auto ty) {
          using Y = decltype(ty);
          Y* py = y.data<Y>();
          int_conv(g_, ctx.input(0).data<decltype(tx)>(), ctx.input(3).data<decltype(tw)>(), xz, wz,
                   [&](int64_t i, int64_t m, int32_t acc) {
                     const float scale = xs * float(pick(ws, m)) / ys;
                     py[i] = saturate<Y>(std::nearbyint(float(acc + (bias ? bias[m] : 0)) * scale) + yz);
                   });
        });
      });
    });
  }

 private:
  Geometry g_;
};

const KernelRegistrar conv_integer_reg({"", "ConvInteger", 10, kMaxOpset, {}},
                                       [](const Node& n) { return std::make_unique<ConvIntegerKernel>(n); });
const KernelRegistrar qlinear_conv_reg({"", "QLinearConv", 10, kMaxOpset, {}},
                                       [](const Node& n) { return std::make_unique<QLinearConvKernel>(n); });

}  // namespace
}  // namespace kiln

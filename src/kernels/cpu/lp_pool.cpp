// LpPool and GlobalLpPool: y = (sum over the window of |x|^p)^(1/p), padding contributing nothing.
// oneDNN has no Lp pooling, so these are plain loops over the same window geometry as MaxPool
// (strides, pads, auto_pad, and opset 18's dilations and ceil_mode).
// LpPool's gradient, ai.kiln.LpPoolGrad, is in lp_pool_grad.cpp.
#include <fmt/format.h>

#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/lp_pool_common.h"
#include "kernels/cpu/pool_common.h"
#include "kernels/cpu/visit_float.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::lp {

// p is a float before opset 2 and an int after; both mean the same.
double read_p(const Node& node, const char* op) {
  const auto it = node.attrs.find("p");
  const double p = it == node.attrs.end()                      ? 2.0
                   : it->second.kind == Attribute::Kind::Float ? double(it->second.f)
                                                               : double(it->second.i);
  if (!(p > 0)) throw InvalidModel(fmt::format("{}: p = {} must be positive", op, p));
  return p;
}

void check_input(const char* op, const TensorMeta& x, size_t max_spatial) {
  if (x.shape.size() < 3)
    throw ShapeError(
        fmt::format("{}: input {} must be [N, C, D1, ...] with at least one spatial dim", op, x.describe()));
  if (x.shape.size() - 2 > max_spatial)
    throw Unsupported(fmt::format("{}: input {} has {} spatial dims; Kiln supports 1 to {}", op, x.describe(),
                                  x.shape.size() - 2, max_spatial));
}

}  // namespace kiln::lp

namespace kiln {
namespace {

using lp::check_input;
using lp::read_p;

inline double lp_combine(double sum, double p) {
  return p == 1 ? sum : p == 2 ? std::sqrt(sum) : std::pow(sum, 1.0 / p);
}

inline double lp_term(double v, double p) {
  const double a = std::abs(v);
  return p == 1 ? a : p == 2 ? a * a : std::pow(a, p);
}

// Spatial dims padded to three; one (batch, channel) plane per task.
template <class T>
void lp_pool(const T* x, T* y, int64_t planes, const Shape& x_spatial, const dnnl_util::Window& w, double p) {
  const size_t nsp = w.out.size(), off = 3 - nsp;
  std::vector<int64_t> in(3, 1), out(3, 1), k(3, 1), s(3, 1), d(3, 1), pb(3, 0);
  for (size_t i = 0; i < nsp; ++i) {
    in[off + i] = x_spatial[i];
    out[off + i] = w.out[i];
    k[off + i] = w.kernel[i];
    s[off + i] = w.strides[i];
    d[off + i] = w.dilations[i];
    pb[off + i] = w.pad_begin[i];
  }
  const int64_t in_plane = in[0] * in[1] * in[2], out_plane = out[0] * out[1] * out[2];
  parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      const T* xp = x + pl * in_plane;
      T* yp = y + pl * out_plane;
      for (int64_t o0 = 0; o0 < out[0]; ++o0)
        for (int64_t o1 = 0; o1 < out[1]; ++o1)
          for (int64_t o2 = 0; o2 < out[2]; ++o2) {
            double sum = 0;
            for (int64_t k0 = 0; k0 < k[0]; ++k0) {
              const int64_t i0 = o0 * s[0] - pb[0] + k0 * d[0];
              if (i0 < 0 || i0 >= in[0]) continue;
              for (int64_t k1 = 0; k1 < k[1]; ++k1) {
                const int64_t i1 = o1 * s[1] - pb[1] + k1 * d[1];
                if (i1 < 0 || i1 >= in[1]) continue;
                for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                  const int64_t i2 = o2 * s[2] - pb[2] + k2 * d[2];
                  if (i2 < 0 || i2 >= in[2]) continue;
                  sum += lp_term(to_double(xp[(i0 * in[1] + i1) * in[2] + i2]), p);
                }
              }
            }
            yp[(o0 * out[1] + o1) * out[2] + o2] = from_double<T>(lp_combine(sum, p));
          }
    }
  });
}

class LpPoolKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    check_input("LpPool", x, 3);
    p_ = read_p(node_, "LpPool");
    spatial_.assign(x.shape.begin() + 2, x.shape.end());
    if (!node_.has_attr("kernel_shape")) throw InvalidModel("LpPool: attribute 'kernel_shape' is required");
    const std::vector<int64_t> kernel = node_.attr_ints("kernel_shape");
    if (kernel.size() != spatial_.size())
      throw ShapeError(fmt::format("LpPool: kernel_shape [{}] has {} dims but input {} has {} spatial dims",
                                   fmt::join(kernel, ", "), kernel.size(), x.describe(), spatial_.size()));
    for (int64_t k : kernel)
      if (k < 1) throw InvalidModel(fmt::format("LpPool: kernel_shape [{}] must be positive", fmt::join(kernel, ", ")));
    win_ = dnnl_util::make_window(node_, spatial_, kernel, true);
    Shape y{x.shape[0], x.shape[1]};
    y.insert(y.end(), win_.out.begin(), win_.out.end());
    return {TensorMeta{x.dtype, y, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    visit_float(x.dtype(), "LpPool", [&](auto tag) {
      using T = decltype(tag);
      lp_pool<T>(x.data<T>(), ctx.output(0).data<T>(), x.dim(0) * x.dim(1), spatial_, win_, p_);
    });
  }

 private:
  double p_ = 2;
  Shape spatial_;
  dnnl_util::Window win_;
};

class GlobalLpPoolKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    check_input("GlobalLpPool", x, size_t(1) << 20);
    p_ = read_p(node_, "GlobalLpPool");
    Shape y = x.shape;
    std::fill(y.begin() + 2, y.end(), 1);
    return {TensorMeta{x.dtype, y, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t planes = x.dim(0) * x.dim(1), plane = planes ? x.numel() / planes : 0;
    visit_float(x.dtype(), "GlobalLpPool", [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.data<T>();
      T* py = ctx.output(0).data<T>();
      parallel_for(planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, plane)), [&](int64_t b, int64_t e) {
        for (int64_t pl = b; pl < e; ++pl) {
          double sum = 0;
          for (int64_t i = 0; i < plane; ++i) sum += lp_term(to_double(px[pl * plane + i]), p_);
          py[pl] = from_double<T>(lp_combine(sum, p_));
        }
      });
    });
  }

 private:
  double p_ = 2;
};

const std::vector<DType> kFloats = {DType::Float32, DType::Float64, DType::Float16};
const KernelRegistrar lp_pool_reg({"", "LpPool", 1, kMaxOpset, kFloats},
                                  [](const Node& n) { return std::make_unique<LpPoolKernel>(n); });
const KernelRegistrar global_lp_pool_reg({"", "GlobalLpPool", 1, kMaxOpset, kFloats},
                                         [](const Node& n) { return std::make_unique<GlobalLpPoolKernel>(n); });

}  // namespace
}  // namespace kiln

// ai.kiln.LpPoolGrad, the gradient of LpPool (lp_pool.cpp) with respect to its input, over the same
// window table as the pooling gradients (pool_common.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "kernels/cpu/lp_pool_common.h"
#include "kernels/cpu/pool_common.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using lp::check_input;
using lp::read_p;

// (dY, X, Y) -> dX: dY/dX_i = sign(x_i) |x_i|^(p-1) / y^(p-1) for every window containing i.
class LpPoolGradKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& dy = ctx.input(0);
    const TensorMeta& x = ctx.input(1);
    check_input("LpPoolGrad", x, 3);
    p_ = read_p(node_, "LpPoolGrad");
    const Shape spatial(x.shape.begin() + 2, x.shape.end());
    if (!node_.has_attr("kernel_shape")) throw InvalidModel("LpPoolGrad: attribute 'kernel_shape' is required");
    const std::vector<int64_t> kernel = node_.attr_ints("kernel_shape");
    if (kernel.size() != spatial.size())
      throw ShapeError(
          fmt::format("LpPoolGrad: kernel_shape [{}] does not fit X {}", fmt::join(kernel, ", "), x.describe()));
    const dnnl_util::Window win = dnnl_util::make_window(node_, spatial, kernel, true);
    Shape y{x.shape[0], x.shape[1]};
    y.insert(y.end(), win.out.begin(), win.out.end());
    if (dy.shape != y || ctx.shape(2) != y || dy.dtype != x.dtype || ctx.dtype(2) != x.dtype)
      throw ShapeError(fmt::format("LpPoolGrad: dY {} and Y {} must be {}{}, the pooled shape of X {}", dy.describe(),
                                   ctx.input(2).describe(), dtype_name(x.dtype), to_string(y), x.describe()));
    table_ = pool::make_table(spatial, win);
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(1);
    Tensor& dx = ctx.output(0);
    visit_dtype(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        const T* pdy = ctx.input(0).data<T>();
        const T* px = x.data<T>();
        const T* py = ctx.input(2).data<T>();
        T* pdx = dx.data<T>();
        std::fill(pdx, pdx + dx.numel(), T(0));
        const pool::WindowTable& t = table_;
        parallel_for(x.dim(0) * x.dim(1), 1, [&](int64_t begin, int64_t end) {
          for (int64_t pl = begin; pl < end; ++pl)
            for (int64_t o = 0; o < t.out_plane; ++o) {
              const double y = double(py[pl * t.out_plane + o]);
              if (y == 0) continue;  // every tap is 0: the subgradient 0
              const double scale = double(pdy[pl * t.out_plane + o]) / std::pow(y, p_ - 1);
              for (int64_t k = t.start[size_t(o)]; k < t.start[size_t(o) + 1]; ++k) {
                const int64_t i = pl * t.in_plane + t.taps[size_t(k)];
                const double v = double(px[i]);
                const double d = p_ == 1   ? (v > 0) - (v < 0)
                                 : p_ == 2 ? v
                                           : std::copysign(std::pow(std::abs(v), p_ - 1), v);
                pdx[i] += static_cast<T>(scale * d);
              }
            }
        });
      } else {
        throw Unsupported(
            fmt::format("LpPoolGrad: {} inputs (float32 and float64 are supported)", dtype_name(x.dtype())));
      }
    });
  }

 private:
  double p_ = 2;
  pool::WindowTable table_;
};

const KernelRegistrar lp_pool_grad_reg({kKilnDomain, "LpPoolGrad", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                                       [](const Node& n) { return std::make_unique<LpPoolGradKernel>(n); });
const OpDocRegistrar lp_pool_grad_doc(
    {kKilnDomain,
     "LpPoolGrad",
     "Gradient of LpPool with respect to its input; attributes are the LpPool's (p, kernel_shape, strides, pads, "
     "auto_pad, dilations, ceil_mode).",
     {"dY: gradient of the LpPool output Y", "X: the LpPool input", "Y: the LpPool output"},
     {"dX: gradient of X, X's shape"},
     "dX[i] = sum over windows w containing i of dY[w] * sign(X[i]) |X[i]|^(p-1) / Y[w]^(p-1) (0 where Y[w] = 0)"});

}  // namespace
}  // namespace kiln

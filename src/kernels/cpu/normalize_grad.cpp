// ai.kiln.LRNGrad: the gradient of LRN (kernels/cpu/normalize.cpp), emitted by
// autodiff/normalize.cpp. With ONNX's window W(c) = [c - (size-1)/2, c + size/2], a = alpha / size,
// D_c = bias + a * sum_{c' in W(c)} x_c'^2 and y_c = x_c * D_c^-beta:
//   dx_j = dy_j * D_j^-beta - 2 a beta x_j * sum_{c : j in W(c)} dy_c x_c D_c^(-beta-1)
// computed in double from X (D is recomputed: one more window pass instead of a saved tensor).
#include <fmt/format.h>

#include <cmath>

#include "core/parallel.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

class LrnGradKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& dy = ctx.input(0);
    const TensorMeta& x = ctx.input(1);
    if (dy.shape != x.shape || dy.dtype != x.dtype || x.shape.size() < 2)
      throw ShapeError(fmt::format("LRNGrad: dY {}{} must match X {}{} (rank >= 2)", dtype_name(dy.dtype),
                                   to_string(dy.shape), dtype_name(x.dtype), to_string(x.shape)));
    if (node_.attr_int("size") < 1)
      throw InvalidModel(fmt::format("LRNGrad: size {} must be positive", node_.attr_int("size")));
    return {{x.dtype, x.shape, x.dynamic, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    visit_dtype(ctx.input(1).dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half>) run<T>(ctx);
      else throw TypeError(fmt::format("LRNGrad: {} input", ctx.input(1).describe()));
    });
  }

 private:
  template <class T>
  void run(ComputeContext& ctx) const {
    const Tensor& xt = ctx.input(1);
    const int64_t n = xt.dim(0), c = xt.dim(1), rest = xt.numel() / std::max<int64_t>(1, n * c);
    const int64_t size = node_.attr_int("size"), lo = (size - 1) / 2, hi = size - 1 - lo;
    const double a = double(node_.attr_float("alpha", 1e-4f)) / double(size), beta = node_.attr_float("beta", 0.75f),
                 k = node_.attr_float("bias", 1.f);
    const T* x = xt.data<T>();
    const T* dy = ctx.input(0).data<T>();
    T* dx = ctx.output(0).data<T>();
    // One (sample, spatial position) column of c channels at a time.
    parallel_for(n * rest, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, c * size)), [&](int64_t s, int64_t e) {
      std::vector<double> d(static_cast<size_t>(c)), w(static_cast<size_t>(c));
      for (int64_t col = s; col < e; ++col) {
        const int64_t b = col / rest, i = col % rest;
        auto at = [&](int64_t ch) { return (b * c + ch) * rest + i; };
        for (int64_t ch = 0; ch < c; ++ch) {
          double sum = 0;
          for (int64_t cc = std::max<int64_t>(0, ch - lo); cc <= std::min(c - 1, ch + hi); ++cc) {
            const double v = to_double(x[at(cc)]);
            sum += v * v;
          }
          d[size_t(ch)] = k + a * sum;
          w[size_t(ch)] = to_double(dy[at(ch)]) * to_double(x[at(ch)]) * std::pow(d[size_t(ch)], -beta - 1.0);
        }
        for (int64_t j = 0; j < c; ++j) {
          double back = 0;  // channels c whose window holds j: j - hi <= c <= j + lo
          for (int64_t cc = std::max<int64_t>(0, j - hi); cc <= std::min(c - 1, j + lo); ++cc) back += w[size_t(cc)];
          const double xj = to_double(x[at(j)]);
          dx[at(j)] = from_double<T>(to_double(dy[at(j)]) * std::pow(d[size_t(j)], -beta) - 2.0 * a * beta * xj * back);
        }
      }
    });
  }
};

const KernelRegistrar reg({kKilnDomain, "LRNGrad", 1, kMaxOpset, {DType::Float32, DType::Float64, DType::Float16}},
                          [](const Node& n) { return std::make_unique<LrnGradKernel>(n); });
const OpDocRegistrar doc({kKilnDomain,
                          "LRNGrad",
                          "Gradient of LRN (local response normalisation across channels).",
                          {"dY: gradient of Y", "X: the forward input [N, C, ...]"},
                          {"dX: gradient of X"},
                          "attributes size, alpha, beta, bias as LRN's. W(c) = [c - (size-1)/2, c + size/2], "
                          "D_c = bias + alpha / size * sum_{c' in W(c)} X_c'^2; dX_j = dY_j * D_j^-beta - "
                          "2 * alpha / size * beta * X_j * sum_{c : j in W(c)} dY_c * X_c * D_c^(-beta-1)"});

}  // namespace
}  // namespace kiln

// Det (opset 11): the determinant of each n x n matrix in the last two axes of X, by LU
// factorisation with partial pivoting in double. Its gradient, ai.kiln.DetGrad, is in det_grad.cpp.
#include <fmt/format.h>

#include "core/parallel.h"
#include "kernels/cpu/det_common.h"
#include "kernels/cpu/visit_float.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

class DetKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& x = ctx.input(0);
    if (x.shape.size() < 2 || x.shape[x.shape.size() - 1] != x.shape[x.shape.size() - 2])
      throw ShapeError(fmt::format("Det: X {}{} must be [..., n, n]", dtype_name(x.dtype), to_string(x.shape)));
    return {TensorMeta{x.dtype, Shape(x.shape.begin(), x.shape.end() - 2), x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t n = x.dim(-1), count = n ? x.numel() / (n * n) : ctx.output(0).numel();
    visit_float(x.dtype(), "Det", [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.data<T>();
      T* py = ctx.output(0).data<T>();
      parallel_for(count, 16, [&](int64_t b, int64_t e) {
        std::vector<double> a(static_cast<size_t>(n * n));
        std::vector<int64_t> perm;
        for (int64_t m = b; m < e; ++m) {
          for (int64_t i = 0; i < n * n; ++i) a[size_t(i)] = to_double(px[m * n * n + i]);
          py[m] = from_double<T>(det::lu(a, n, perm));
        }
      });
    });
  }
};

const KernelRegistrar det_reg({"", "Det", 11, kMaxOpset, {DType::Float32, DType::Float64, DType::Float16}},
                              [](const Node& n) { return std::make_unique<DetKernel>(n); });

}  // namespace
}  // namespace kiln

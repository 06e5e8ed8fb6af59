// ai.kiln.DetGrad: the gradient of Det (det.cpp), dX = dY * adj(X)^T, the cofactor matrix. Where X
// is invertible that is dY det(X) X^-T (from the LU factors); a singular matrix's cofactors come
// from the definition, det of each minor (n > 1), so rank n - 1 matrices get their non-zero
// gradient too.
#include <fmt/format.h>

#include "core/parallel.h"
#include "kernels/cpu/det_common.h"
#include "kernels/cpu/visit_float.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

// The cofactor matrix C (C[i][j] = (-1)^(i+j) det(minor(i, j))) of the n x n matrix `a`.
std::vector<double> cofactors(const std::vector<double>& a, int64_t n) {
  std::vector<double> c(static_cast<size_t>(n * n));
  if (n == 1) {
    c[0] = 1;
    return c;
  }
  std::vector<double> lu = a;
  std::vector<int64_t> perm;
  const double d = det::lu(lu, n, perm);
  if (d != 0) {
    // C = det * X^-T: solve X^T C^T... column j of X^-1 from the factors, for each j.
    std::vector<double> col(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < n; ++i) col[size_t(i)] = perm[size_t(i)] == j ? 1.0 : 0.0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < i; ++k) col[size_t(i)] -= lu[size_t(i * n + k)] * col[size_t(k)];
      for (int64_t i = n - 1; i >= 0; --i) {
        for (int64_t k = i + 1; k < n; ++k) col[size_t(i)] -= lu[size_t(i * n + k)] * col[size_t(k)];
        col[size_t(i)] /= lu[size_t(i * n + i)];
      }
      // col = X^-1[:, j]; C[j][i] = det * X^-1[i][j].
      for (int64_t i = 0; i < n; ++i) c[size_t(j * n + i)] = d * col[size_t(i)];
    }
    return c;
  }
  std::vector<double> minor(static_cast<size_t>((n - 1) * (n - 1)));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      size_t m = 0;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t k = 0; k < n; ++k)
          if (r != i && k != j) minor[m++] = a[size_t(r * n + k)];
      c[size_t(i * n + j)] = ((i + j) % 2 ? -1.0 : 1.0) * det::lu(minor, n - 1, perm);
    }
  return c;
}

class DetGradKernel final : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta &dy = ctx.input(0), &x = ctx.input(1);
    if (x.shape.size() < 2 || dy.shape != Shape(x.shape.begin(), x.shape.end() - 2) || dy.dtype != x.dtype)
      throw ShapeError(fmt::format("DetGrad: dY {}{} must be the batch shape of X {}{}", dtype_name(dy.dtype),
                                   to_string(dy.shape), dtype_name(x.dtype), to_string(x.shape)));
    return {TensorMeta{x.dtype, x.shape, x.dynamic, Tensor()}};
  }
  void compute(ComputeContext& ctx) override {
    visit_float32_64(ctx.input(1).dtype(), "DetGrad", [&](auto tag) { run<decltype(tag)>(ctx); });
  }

 private:
  template <class T>
  void run(ComputeContext& ctx) {
    const Tensor &dy = ctx.input(0), &x = ctx.input(1);
    const int64_t n = x.dim(-1), count = dy.numel();
    const T *pdy = dy.data<T>(), *px = x.data<T>();
    T* pdx = ctx.output(0).data<T>();
    parallel_for(count, 16, [&](int64_t b, int64_t e) {
      std::vector<double> a(static_cast<size_t>(n * n));
      for (int64_t m = b; m < e; ++m) {
        for (int64_t i = 0; i < n * n; ++i) a[size_t(i)] = double(px[m * n * n + i]);
        const std::vector<double> c = cofactors(a, n);
        for (int64_t i = 0; i < n * n; ++i) pdx[m * n * n + i] = T(double(pdy[m]) * c[size_t(i)]);
      }
    });
  }
};

const KernelRegistrar det_grad_reg({kKilnDomain, "DetGrad", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                                   [](const Node& n) { return std::make_unique<DetGradKernel>(n); });
const OpDocRegistrar det_grad_doc({kKilnDomain,
                                   "DetGrad",
                                   "Gradient of Det with respect to its input.",
                                   {"dY: gradient of the Det output [...]", "X: the Det input [..., n, n]"},
                                   {"dX: gradient of X, X's shape"},
                                   "dX = dY * cofactor(X) (= dY det(X) X^-T where X is invertible)"});

}  // namespace
}  // namespace kiln

// ai.kiln.LinearCrossEntropyGrad(dloss, X, W, labels, lse) -> dX, dW: the gradient of
// ai.kiln.LinearCrossEntropy (linear_loss_fused.cpp), a block of the vocabulary at a time. Each
// block's logits are recomputed into one rows x ceil(V / chunks) buffer and turned in place into
// the block of dlogits = s_r (softmax_r - onehot(label_r)), with s_r = dloss / (rows counted) under
// mean, dloss under sum, and 0 for an ignored row; then
//   dX += dlogits W_block,   dW_block = dlogits^T X   (the block's rows of dW, or columns when W is [d, V]).
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/linear_loss_common.h"
#include "kernels/cpu/vector_math.h"

namespace kiln {
namespace {

using linear_loss::Attrs;
using linear_loss::Geometry;

constexpr const char* kOp = "LinearCrossEntropyGrad";

class LinearCrossEntropyGrad final : public Kernel {
 public:
  explicit LinearCrossEntropyGrad(const Node& n) : Kernel(n), attrs_(linear_loss::attrs_of(n, kOp)) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (ctx.num_inputs() != 5) throw InvalidModel(fmt::format("{} takes 5 inputs (dloss, X, W, labels, lse)", kOp));
    linear_loss::check(ctx, 1, attrs_, kOp);
    const Shape& x = ctx.shape(1);
    if (numel(ctx.shape(0)) != 1 || ctx.dtype(0) != ctx.dtype(1))
      throw ShapeError(fmt::format("{}: dloss must be a scalar of X's dtype, got {}{}", kOp, dtype_name(ctx.dtype(0)),
                                   to_string(ctx.shape(0))));
    const Shape rows(x.begin(), x.end() - 1);
    if (ctx.shape(4) != rows || ctx.dtype(4) != ctx.dtype(1))
      throw ShapeError(fmt::format("{}: lse must be {}{} (the forward's second output), got {}{}", kOp,
                                   dtype_name(ctx.dtype(1)), to_string(rows), dtype_name(ctx.dtype(4)),
                                   to_string(ctx.shape(4))));
    return {TensorMeta{ctx.dtype(1), x, false, Tensor()}, TensorMeta{ctx.dtype(2), ctx.shape(2), false, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    linear_loss::dispatch(ctx.input(1).dtype(), ctx.input(3).dtype(), [&]<class T, class L>() { run<T, L>(ctx); });
  }

 private:
  template <class T, class L>
  void run(ComputeContext& ctx) {
    const Tensor& xt = ctx.input(1);
    const Tensor& wt = ctx.input(2);
    const Geometry g = linear_loss::geometry_of(xt, wt, attrs_);
    const T* x = xt.data<T>();
    const T* w = wt.data<T>();
    const T* lse = ctx.input(4).data<T>();
    const L* labels = ctx.input(3).data<L>();
    T* dx = ctx.output(0).data<T>();
    T* dw = ctx.output(1).data<T>();
    const double dloss = static_cast<double>(ctx.input(0).data<T>()[0]);
    std::vector<int64_t> target;
    const int64_t counted = linear_loss::row_classes(labels, attrs_, g, kOp, target);
    const double scale = attrs_.mean ? dloss / static_cast<double>(counted) : dloss;
    const int64_t d = g.features, v = g.classes, width_max = g.chunk();
    block_.resize(static_cast<size_t>(g.rows * width_max) * sizeof(T));
    T* p = reinterpret_cast<T*>(block_.data());
    for (int64_t c0 = 0; c0 < v; c0 += width_max) {
      const int64_t width = std::min(width_max, v - c0);
      linear_loss::chunk_logits<T>(g, attrs_.trans_b, x, w, c0, width, p);
      parallel_for(g.rows, 16, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          T* row = p + r * width;
          const int64_t t = target[static_cast<size_t>(r)];
          const double s = t < 0 ? 0.0 : scale;
          if constexpr (std::is_same_v<T, float>) {
            vmath::scaled_exp(row, row, width, static_cast<double>(lse[r]), s);
          } else {
            for (int64_t c = 0; c < width; ++c) row[c] = s * std::exp(row[c] - lse[r]);
          }
          if (t >= c0 && t < c0 + width) row[t - c0] = static_cast<T>(static_cast<double>(row[t - c0]) - s);
        }
      });
      const T beta = c0 == 0 ? T(0) : T(1);
      if (attrs_.trans_b) {  // W [V, d]: dX += P W[c0:c0+w], dW[c0:c0+w] = P^T X
        linear_loss::gemm<T>({false, false, g.rows, d, width, width, d, d}, T(1), p, w + c0 * d, beta, dx);
        linear_loss::gemm<T>({true, false, width, d, g.rows, width, d, d}, T(1), p, x, T(0), dw + c0 * d);
      } else {  // W [d, V]: dX += P W[:, c0:c0+w]^T, dW[:, c0:c0+w] = X^T P
        linear_loss::gemm<T>({false, true, g.rows, d, width, width, v, d}, T(1), p, w + c0, beta, dx);
        linear_loss::gemm<T>({true, false, d, width, g.rows, d, width, v}, T(1), x, p, T(0), dw + c0);
      }
    }
  }

  Attrs attrs_;
  std::vector<unsigned char> block_;  // one block of dlogits, kept from run to run
};

const KernelRegistrar reg({kKilnDomain, kOp, 1, kMaxOpset, {DType::Float32, DType::Float64}, 1},
                          [](const Node& n) { return std::make_unique<LinearCrossEntropyGrad>(n); });

const OpDocRegistrar doc(
    {kKilnDomain,
     kOp,
     "The gradient of ai.kiln.LinearCrossEntropy, a block of the vocabulary at a time (the block's logits "
     "recomputed from X and W, and lse): the rows x V logits and their gradient never exist whole. Attributes: "
     "those of the forward node.",
     {"dloss: the loss's gradient, a scalar of X's dtype", "X: [..., d]", "W: [V, d] (trans_b) or [d, V]",
      "labels: X's shape less its last axis", "lse: the forward's second output"},
     {"dX: X's shape", "dW: W's shape"},
     "s_r = dloss / (rows not ignored) under mean, dloss under sum, 0 for an ignored row;  dlogits_rc = s_r "
     "(exp(logits_rc - lse_r) - [c == label_r]);  dX = dlogits W (trans_b) or dlogits W^T;  dW = dlogits^T X "
     "(trans_b) or X^T dlogits"});

}  // namespace
}  // namespace kiln

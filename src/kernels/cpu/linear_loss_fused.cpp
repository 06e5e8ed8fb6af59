// ai.kiln.LinearCrossEntropy(X, W, labels) -> loss, lse: the cross-entropy of the logits X W^T
// (a language-model head and its loss in one node), computed over `chunks` blocks of the
// vocabulary so that the R x V logits never exist whole: each block's logits go to one
// R x ceil(V / chunks) buffer, and each row keeps a running maximum and sum of exponentials (the
// log-sum-exp across blocks) and picks its label's logit from the block that holds it. The node
// the LM-head serialization (training/serialized_head.cpp) writes in place of MatMul ->
// SoftmaxCrossEntropyLoss; its gradient is ai.kiln.LinearCrossEntropyGrad (linear_loss_grad.cpp),
// which recomputes the blocks from lse.
//
//   loss = reduce over the rows not ignored of (lse_r - logit_r[label_r]),  reduce = mean or sum
//   lse_r = log sum_c exp(logit_r[c])   (output 1, [R], for the gradient)
#include <cmath>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/linear_loss_common.h"
#include "kernels/cpu/vector_math.h"

namespace kiln {
namespace {

using linear_loss::Attrs;
using linear_loss::Geometry;

constexpr const char* kOp = "LinearCrossEntropy";

// The running log-sum-exp of one row over the blocks seen so far.
struct RowState {
  double max = -std::numeric_limits<double>::infinity();
  double sum = 0;
  double target = 0;
};

template <class T>
void add_block(const T* row, int64_t width, RowState& s) {
  double m = -std::numeric_limits<double>::infinity();
  if constexpr (std::is_same_v<T, float>) {
    m = vmath::max(row, width);
  } else {
    for (int64_t c = 0; c < width; ++c) m = std::max(m, static_cast<double>(row[c]));
  }
  const double shift = std::max(m, s.max);
  if (!std::isfinite(shift)) return;  // an all -inf block so far: nothing to add
  double block = 0;
  if constexpr (std::is_same_v<T, float>) {
    block = vmath::sum_exp(row, width, shift);
  } else {
    for (int64_t c = 0; c < width; ++c) block += std::exp(row[c] - shift);
  }
  s.sum = (std::isfinite(s.max) ? s.sum * std::exp(s.max - shift) : 0.0) + block;
  s.max = shift;
}

class LinearCrossEntropy final : public Kernel {
 public:
  explicit LinearCrossEntropy(const Node& n) : Kernel(n), attrs_(linear_loss::attrs_of(n, kOp)) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    if (ctx.num_inputs() != 3) throw InvalidModel(fmt::format("{} takes 3 inputs (X, W, labels)", kOp));
    linear_loss::check(ctx, 0, attrs_, kOp);
    const Shape& x = ctx.shape(0);
    std::vector<TensorMeta> out{TensorMeta{ctx.dtype(0), {}, false, Tensor()}};
    if (node_.outputs.size() > 1)
      out.push_back(TensorMeta{ctx.dtype(0), Shape(x.begin(), x.end() - 1), false, Tensor()});
    return out;
  }

  void compute(ComputeContext& ctx) override {
    linear_loss::dispatch(ctx.input(0).dtype(), ctx.input(2).dtype(), [&]<class T, class L>() { run<T, L>(ctx); });
  }

 private:
  template <class T, class L>
  void run(ComputeContext& ctx) {
    const Tensor& xt = ctx.input(0);
    const Tensor& wt = ctx.input(1);
    const Geometry g = linear_loss::geometry_of(xt, wt, attrs_);
    const T* x = xt.data<T>();
    const T* w = wt.data<T>();
    const L* labels = ctx.input(2).data<L>();
    std::vector<int64_t> target;
    linear_loss::row_classes(labels, attrs_, g, kOp, target);
    std::vector<RowState> state(static_cast<size_t>(g.rows));
    const int64_t width_max = g.chunk();
    block_.resize(static_cast<size_t>(g.rows * width_max) * sizeof(T));
    T* logits = reinterpret_cast<T*>(block_.data());
    for (int64_t c0 = 0; c0 < g.classes; c0 += width_max) {
      const int64_t width = std::min(width_max, g.classes - c0);
      linear_loss::chunk_logits<T>(g, attrs_.trans_b, x, w, c0, width, logits);
      parallel_for(g.rows, 16, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const T* row = logits + r * width;
          RowState& s = state[static_cast<size_t>(r)];
          add_block(row, width, s);
          const int64_t t = target[static_cast<size_t>(r)];
          if (t >= c0 && t < c0 + width) s.target = static_cast<double>(row[t - c0]);
        }
      });
    }
    double total = 0;
    int64_t counted = 0;
    T* lse = node_.outputs.size() > 1 && !node_.outputs[1].empty() ? ctx.output(1).data<T>() : nullptr;
    for (int64_t r = 0; r < g.rows; ++r) {
      const RowState& s = state[static_cast<size_t>(r)];
      const double l = s.max + std::log(s.sum);
      if (lse) lse[r] = static_cast<T>(l);
      if (target[static_cast<size_t>(r)] < 0) continue;
      total += l - s.target;
      ++counted;
    }
    // torch's mean over no counted rows is 0 / 0.
    const double loss = attrs_.mean ? total / static_cast<double>(counted) : total;
    ctx.output(0).data<T>()[0] = static_cast<T>(loss);
  }

  Attrs attrs_;
  std::vector<unsigned char> block_;  // the block's logits, kept from run to run
};

const KernelRegistrar reg({kKilnDomain, kOp, 1, kMaxOpset, {DType::Float32, DType::Float64}},
                          [](const Node& n) { return std::make_unique<LinearCrossEntropy>(n); });

const OpDocRegistrar doc(
    {kKilnDomain,
     kOp,
     "A language-model head and its cross-entropy in one node: the logits X W^T are computed over `chunks` "
     "blocks of the vocabulary into one rows x ceil(V / chunks) buffer, so that the rows x V logits never exist "
     "whole (the LM-head serialization of IPUConfig's embedding / projection_serialization_factor writes it). "
     "Attributes: chunks (1), trans_b (1: W is [V, d]; 0: [d, V]), ignore_index (absent: none), reduction "
     "('mean' over the rows not ignored, or 'sum').",
     {"X: [..., d] float32 or float64", "W: [V, d] (trans_b) or [d, V], X's dtype",
      "labels: int32 or int64, X's shape less its last axis; each in [0, V) or ignore_index"},
     {"loss: scalar, X's dtype", "lse (optional): [rows], log sum exp of each row's logits, for the gradient"},
     "logits = X W^T in blocks;  lse_r = log sum_c exp(logits_rc) (a running max and sum across blocks, in "
     "double);  loss = mean (or sum) over rows with label != ignore_index of lse_r - logits_r,label_r"});

}  // namespace
}  // namespace kiln

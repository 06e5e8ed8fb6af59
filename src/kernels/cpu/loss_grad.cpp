// Gradients of the loss ops (loss.cpp), as ONNX defines the losses:
//   ai.kiln.SoftmaxCrossEntropyLossGrad(dY, X, labels[, weights]) -> (dScores[, dWeights])
//   ai.kiln.NegativeLogLikelihoodLossGrad(dY, input, target[, weight]) -> (dInput[, dWeight])
//   ai.kiln.SoftmaxCrossEntropyLossAndGrad(dY, scores, labels[, weights]) -> (dScores, loss[, dWeights]):
//     a training graph's SoftmaxCrossEntropyLoss and its gradient in one pass over the scores
//     (ir/fusion.h, fuse_loss_with_gradient): the loss, reduced as the forward's, from the same
//     log-sum-exp of each row the gradient takes (float32 exponentials within 2 ulp, summed in
//     double, where the forward takes them in double).
//
// With the (N, C, D) view, element i = (n, d) has target t_i, weight w_i (w[t_i], 1 without
// weights, 0 where t_i == ignore_index) and loss l_i = -w_i * logp[n, t_i, d]. The reduction gives
// each element a coefficient a_i = dL/dl_i:  none: dY_i;  sum: dY;  mean: dY / W with W = sum_i w_i.
// Then
//   NLL:  dInput[n, c, d]  = -a_i * w_i * [c == t_i]
//   SCE:  dScores[n, c, d] =  a_i * w_i * (softmax[n, c, d] - [c == t_i])
// and the class weights' gradient, with A_c = sum_{i: t_i = c} -logp_i and K_c = #{i: t_i = c}
// over counted elements:  none: sum_{i: t_i = c} dY_i * -logp_i;  sum: dY * A_c;
// mean: dY * (A_c - L * K_c) / W  (L the mean loss: the quotient rule on sum(l) / sum(w)).
// When nothing counts (W = 0) the forward's mean is NaN; the gradient is 0 there.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/log_softmax_row.h"
#include "kernels/cpu/loss_reduction.h"
#include "kernels/cpu/low_precision.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

using loss::parse_reduction;
using loss::Reduction;

class LossGradKernel : public Kernel {
 public:
  // `with_loss`: SoftmaxCrossEntropyLossAndGrad, which also writes the loss (output 1).
  LossGradKernel(const Node& n, bool softmax, bool with_loss = false)
      : Kernel(n), softmax_(softmax), with_loss_(with_loss), reduction_(parse_reduction(n)) {
    if (n.has_attr("ignore_index")) ignore_ = n.attr_int("ignore_index");
    out_ = rounded_out_dtype(n);
  }

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const Shape& x = ctx.shape(1);
    const Shape& t = ctx.shape(2);
    if (x.size() < 2) throw ShapeError(fmt::format("input {} must be (N, C) or (N, C, d1, ..., dk)", to_string(x)));
    Shape expected{x[0]};
    expected.insert(expected.end(), x.begin() + 2, x.end());
    if (t != expected)
      throw ShapeError(
          fmt::format("target {} must have shape {} for input {}", to_string(t), to_string(expected), to_string(x)));
    if (ctx.dtype(2) != DType::Int32 && ctx.dtype(2) != DType::Int64)
      throw TypeError(fmt::format("target must be int32 or int64, got {}", dtype_name(ctx.dtype(2))));
    const Shape dy = reduction_ == Reduction::None ? t : Shape{};
    if (ctx.shape(0) != dy)
      throw ShapeError(fmt::format("dY {} must have the loss's shape {}", to_string(ctx.shape(0)), to_string(dy)));
    if (ctx.dtype(1) != ctx.dtype(0))
      throw TypeError(fmt::format("input is {} but dY is {}", dtype_name(ctx.dtype(1)), dtype_name(ctx.dtype(0))));
    if (ctx.has_input(3) && ctx.shape(3) != Shape{x[1]})
      throw ShapeError(fmt::format("weight {} must be [C] = [{}]", to_string(ctx.shape(3)), x[1]));
    n_ = x[0];
    c_ = x[1];
    d_ = numel(Shape(x.begin() + 2, x.end()));
    if (out_ && (!softmax_ || !from_scores() || ctx.dtype(1) != DType::Float32 || x.size() != 2))
      throw InvalidModel(fmt::format("out_dtype {} needs float32 scores [N, C] (not log-probabilities), got {}{}",
                                     dtype_name(*out_), dtype_name(ctx.dtype(1)), to_string(x)));
    std::vector<TensorMeta> out{{out_.value_or(ctx.dtype(0)), x, false, Tensor()}};
    if (with_loss_) out.push_back({ctx.dtype(0), dy, false, Tensor()});
    if (node_.outputs.size() > weights_output()) {
      if (!ctx.has_input(3))
        throw InvalidModel(
            fmt::format("the weights' gradient (output {}) needs the weights (input 3)", weights_output()));
      out.push_back({ctx.dtype(0), {c_}, false, Tensor()});
    }
    return out;
  }

  // dX may take X's buffer: each row's elements are read before they are written (not a 16-bit dX,
  // whose rows are half as long as X's).
  std::optional<size_t> inplace_input() const override { return out_ ? std::nullopt : std::optional<size_t>(1); }

  void compute(ComputeContext& ctx) override {
    visit_dtype(ctx.input(0).dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) run<T>(ctx);
      else throw TypeError(fmt::format("{} supports float and double, got {}", node_.op_type, ctx.input(0).describe()));
    });
  }

 private:
  template <class T>
  void run(ComputeContext& ctx) {
    const std::vector<int64_t> t = ctx.input(2).to_int64_vector();
    const T* weight = ctx.has_input(3) ? ctx.input(3).data<T>() : nullptr;
    const size_t m = t.size();
    std::vector<double> w(m);
    for (size_t i = 0; i < m; ++i) {
      if (ignore_ && t[i] == *ignore_) {
        w[i] = 0;
        continue;
      }
      if (t[i] < 0 || t[i] >= c_)
        throw InvalidArgument(fmt::format("target has value {} at element {}, outside the classes [0, {}){}", t[i], i,
                                          c_,
                                          ignore_ ? fmt::format(" (ignore_index is {})", *ignore_) : std::string()));
      w[i] = weight ? static_cast<double>(weight[t[i]]) : 1.0;
    }
    double wsum = 0;
    for (double v : w) wsum += v;
    const T* dy = ctx.input(0).data<T>();
    auto coefficient = [&](size_t i) -> double {
      if (reduction_ == Reduction::None) return static_cast<double>(dy[i]);
      if (reduction_ == Reduction::Sum) return static_cast<double>(dy[0]);
      return wsum == 0 ? 0.0 : static_cast<double>(dy[0]) / wsum;
    };
    const T* x = ctx.input(1).data<T>();
    T* dx = out_ ? nullptr : ctx.output(0).data<T>();
    void* dx16 = out_ ? ctx.output(0).raw_data() : nullptr;  // out_dtype's rows, each rounded from float32
    // -logp of each counted element, for the weights' gradient.
    std::vector<double> nlogp(m, 0.0);
    const int64_t cls = c_, dd = d_;
    const bool from_scores = this->from_scores();
    parallel_for(n_ * dd, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, cls)), [&](int64_t b, int64_t e) {
      std::vector<T> row_buffer(out_ ? static_cast<size_t>(cls) : 0);
      for (int64_t i = b; i < e; ++i) {
        const int64_t n = i / dd, d = i % dd;
        const T* row = x + n * cls * dd + d;
        T* grow = out_ ? row_buffer.data() : dx + n * cls * dd + d;
        const size_t k = static_cast<size_t>(i);
        const double a = w[k] == 0 ? 0.0 : coefficient(k) * w[k];
        // grow may be row itself (inplace_input): every read of an element comes before its write.
        const double target = w[k] != 0 ? static_cast<double>(row[t[k] * dd]) : 0.0;
        if (!softmax_) {
          for (int64_t c = 0; c < cls; ++c) grow[c * dd] = T(0);
          if (w[k] != 0) {
            grow[t[k] * dd] = static_cast<T>(-a);
            nlogp[k] = -target;
          }
          continue;
        }
        if constexpr (std::is_same_v<T, float>) {
          if (dd == 1 && from_scores) {  // contiguous float32 scores: one vector exp pass, in place in grow
            const float m = vmath::max(row, cls);
            const double sum = vmath::exp_sum(row, grow, cls, m);  // grow = exp(row - m)
            const double e_target = w[k] != 0 ? static_cast<double>(grow[t[k]]) : 0.0;
            const float scale = static_cast<float>(a / sum);
#pragma omp simd
            for (int64_t c = 0; c < cls; ++c) grow[c] *= scale;
            if (w[k] != 0) {
              grow[t[k]] = static_cast<T>(a * (e_target / sum - 1.0));
              nlogp[k] = -(target - m - std::log(sum));
            }
            if (out_ == DType::BFloat16) narrow_values(grow, static_cast<BFloat16*>(dx16) + n * cls, cls);
            else if (out_ == DType::Float16) narrow_values(grow, static_cast<Half*>(dx16) + n * cls, cls);
            continue;
          }
        }
        // log-probabilities: X itself, or log_softmax(X) computed stably in double.
        const double shift = from_scores ? loss::log_sum_exp(row, cls, dd, [](T v) { return v; }) : 0.0;
        for (int64_t c = 0; c < cls; ++c) {
          const double p = std::exp(static_cast<double>(row[c * dd]) - shift);
          grow[c * dd] = static_cast<T>(a * (p - (w[k] != 0 && c == t[k] ? 1.0 : 0.0)));
        }
        if (w[k] != 0) nlogp[k] = -(target - shift);
      }
    });
    if (with_loss_) write_loss<T>(w, nlogp, wsum, ctx.output(1).data<T>());
    const size_t wo = weights_output();
    if (ctx.outputs.size() > wo && ctx.outputs[wo] && ctx.outputs[wo]->defined())
      weight_grad<T>(t, w, nlogp, wsum, dy, ctx.output(wo).data<T>());
  }

  size_t weights_output() const { return with_loss_ ? 2 : 1; }
  // Whether X holds scores (the softmax recomputed from them), not log-probabilities.
  bool from_scores() const { return softmax_ && (with_loss_ || node_.attr_int("x_is_log_prob", 1) == 0); }

  // The forward's loss from the gradient's pass: l_i = w_i * -logp_i (0 where nothing counts),
  // reduced as SoftmaxCrossEntropyLoss reduces it, in double (a mean over nothing counted is NaN).
  template <class T>
  void write_loss(const std::vector<double>& w, const std::vector<double>& nlogp, double wsum, T* out) const {
    if (reduction_ == Reduction::None) {
      for (size_t i = 0; i < w.size(); ++i) out[i] = static_cast<T>(w[i] * nlogp[i]);
      return;
    }
    double sum = 0;
    for (size_t i = 0; i < w.size(); ++i) sum += w[i] * nlogp[i];
    out[0] = static_cast<T>(reduction_ == Reduction::Sum ? sum : sum / wsum);
  }

  template <class T>
  void weight_grad(const std::vector<int64_t>& t, const std::vector<double>& w, const std::vector<double>& nlogp,
                   double wsum, const T* dy, T* dw) const {
    std::vector<double> acc(static_cast<size_t>(c_), 0.0), count(static_cast<size_t>(c_), 0.0);
    double loss = 0;  // sum of l_i
    for (size_t i = 0; i < t.size(); ++i) {
      if (ignore_ && t[i] == *ignore_) continue;
      const size_t c = static_cast<size_t>(t[i]);
      acc[c] += reduction_ == Reduction::None ? static_cast<double>(dy[i]) * nlogp[i] : nlogp[i];
      count[c] += 1;
      loss += w[i] * nlogp[i];
    }
    for (size_t c = 0; c < acc.size(); ++c) {
      double g = acc[c];
      if (reduction_ == Reduction::Sum) g *= static_cast<double>(dy[0]);
      if (reduction_ == Reduction::Mean)
        g = wsum == 0 ? 0.0 : static_cast<double>(dy[0]) * (acc[c] - loss / wsum * count[c]) / wsum;
      dw[c] = static_cast<T>(g);
    }
  }

  bool softmax_;
  bool with_loss_;
  Reduction reduction_;
  std::optional<int64_t> ignore_;
  std::optional<DType> out_;  // dScores rounded to bfloat16 or float16 (ir/fusion.h's fold_16_bit_casts)
  int64_t n_ = 0, c_ = 0, d_ = 1;
};

const std::vector<DType> kTypes{DType::Float32, DType::Float64};
const KernelRegistrar reg_sce({kKilnDomain, "SoftmaxCrossEntropyLossGrad", 1, kMaxOpset, kTypes},
                              [](const Node& n) { return std::make_unique<LossGradKernel>(n, true); });
const KernelRegistrar reg_sce_and_grad({kKilnDomain, "SoftmaxCrossEntropyLossAndGrad", 1, kMaxOpset, kTypes},
                                       [](const Node& n) { return std::make_unique<LossGradKernel>(n, true, true); });
const KernelRegistrar reg_nll({kKilnDomain, "NegativeLogLikelihoodLossGrad", 1, kMaxOpset, kTypes},
                              [](const Node& n) { return std::make_unique<LossGradKernel>(n, false); });

const char* const kLossMath =
    "element i = (n, d) of the (N, C, D) view has target t_i, weight w_i = weight[t_i] (1 without weights, 0 where "
    "t_i == ignore_index) and loss l_i = -w_i * logp[n, t_i, d]; a_i = dY_i (none), dY (sum), dY / sum_i w_i (mean). ";
const OpDocRegistrar doc_sce(
    {kKilnDomain,
     "SoftmaxCrossEntropyLossGrad",
     "The gradient of SoftmaxCrossEntropyLoss with respect to its scores (and weights).",
     {"dY: the gradient of the loss (shape of labels for reduction none, else a scalar)",
      "X: the forward's log_prob output (x_is_log_prob = 1, the default) or its scores (x_is_log_prob = 0; "
      "log_softmax is recomputed)",
      "labels: int32/int64 (N) or (N, d1, ..., dk)", "weights (optional): [C] class weights"},
     {"dScores: the scores' gradient, (N, C, d1, ..., dk); with attribute out_dtype (bfloat16 or float16, for "
      "float32 scores [N, C] and x_is_log_prob = 0) rounded to it",
      "dWeights (optional): the class weights' gradient, [C]"},
     std::string(kLossMath) +
         "attributes reduction and ignore_index as the forward's. dScores[n, c, d] = a_i * w_i * (softmax[n, c, d] - "
         "[c == t_i]); dWeights[c] = sum over counted i with t_i = c of -logp_i * dY_i (none), dY * A_c (sum), "
         "dY * (A_c - L * K_c) / W (mean; A_c = sum -logp_i, K_c their count, W = sum w_i, L the loss); "
         "0 when W = 0"});
const OpDocRegistrar doc_sce_and_grad(
    {kKilnDomain,
     "SoftmaxCrossEntropyLossAndGrad",
     "SoftmaxCrossEntropyLoss and its gradient with respect to its scores (and weights) in one pass over the scores: "
     "the fused form of a training graph's loss and its SoftmaxCrossEntropyLossGrad.",
     {"dY: the gradient of the loss (shape of labels for reduction none, else a scalar)",
      "scores: (N, C) or (N, C, d1, ..., dk)", "labels: int32/int64 (N) or (N, d1, ..., dk)",
      "weights (optional): [C] class weights"},
     {"dScores: as SoftmaxCrossEntropyLossGrad's (out_dtype too)", "loss: as SoftmaxCrossEntropyLoss's output",
      "dWeights (optional): as SoftmaxCrossEntropyLossGrad's"},
     std::string(kLossMath) +
         "attributes reduction and ignore_index as the forward's. loss = reduce(l_i) (mean: sum l_i / sum w_i, "
         "NaN when nothing counts); the log-sum-exp of each row is the gradient's (float32: exponentials within 2 "
         "ulp, summed in double)"});
const OpDocRegistrar doc_nll(
    {kKilnDomain,
     "NegativeLogLikelihoodLossGrad",
     "The gradient of NegativeLogLikelihoodLoss with respect to its input (and weight).",
     {"dY: the gradient of the loss (shape of target for reduction none, else a scalar)",
      "input: the forward's input (N, C, d1, ..., dk); read only for the weight's gradient",
      "target: int32/int64 (N) or (N, d1, ..., dk)", "weight (optional): [C] class weights"},
     {"dInput: the input's gradient", "dWeight (optional): the class weights' gradient, [C]"},
     std::string(kLossMath) +
         "logp = input. dInput[n, c, d] = -a_i * w_i * [c == t_i]; dWeight as SoftmaxCrossEntropyLossGrad's "
         "dWeights"});

}  // namespace
}  // namespace kiln

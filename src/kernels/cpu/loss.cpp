// Loss ops, exactly as ONNX defines them: NegativeLogLikelihoodLoss(input, target[, weight]) and
// SoftmaxCrossEntropyLoss(scores, labels[, weights]) -> (output[, log_prob]).
//
// input/scores are (N, C) or (N, C, d1, ..., dk), target/labels (N) or (N, d1, ..., dk) of int32 or
// int64, weight (C). With D = d1*...*dk, element (n, d) has the loss
//   l = -w[t] * logp[n, t, d]       (t = target[n, d]; w = 1 without weights)
// and l = 0, w = 0 where t == ignore_index. reduction "none" returns l (shape of the target), "sum"
// its sum, "mean" sum(l) / sum(w) — so with weights or ignore_index the mean divides by the weight
// of the targets that count (NaN when none count, as ONNX's reference). For SCE logp is
// log_softmax(scores) over C, computed stably in double and returned as log_prob when asked.
#include <cmath>
#include <limits>

#include "kernels/cpu/elementwise_common.h"
#include "kernels/cpu/log_softmax_row.h"
#include "kernels/cpu/loss_reduction.h"

namespace kiln {

namespace {

using loss::parse_reduction;
using loss::Reduction;

using LossTypes = TypeList<float, double, Half, BFloat16>;

// Sizes of the (N, C, D) view and validation of the three inputs' shapes and dtypes.
struct LossGeometry {
  int64_t n = 0, c = 0, d = 1;
};

LossGeometry check_inputs(const InferContext& ctx, const Node& node, const char* x_name, const char* t_name,
                          const char* w_name) {
  const Shape& x = ctx.shape(0);
  const Shape& t = ctx.shape(1);
  if (x.size() < 2)
    throw ShapeError(fmt::format("{} {} has shape {}; it must be (N, C) or (N, C, d1, ..., dk)", x_name,
                                 input_label(node, 0), to_string(x)));
  Shape expected{x[0]};
  expected.insert(expected.end(), x.begin() + 2, x.end());
  if (t != expected)
    throw ShapeError(fmt::format("{} {} has shape {} but {} {} needs {} {}", t_name, input_label(node, 1), to_string(t),
                                 x_name, to_string(x), t_name, to_string(expected)));
  if (ctx.dtype(1) != DType::Int32 && ctx.dtype(1) != DType::Int64)
    throw TypeError(
        fmt::format("{} {} is {}; it must be int32 or int64", t_name, input_label(node, 1), dtype_name(ctx.dtype(1))));
  if (ctx.has_input(2)) {
    if (ctx.shape(2) != Shape{x[1]})
      throw ShapeError(fmt::format("{} {} has shape {}; it must be [C] = [{}] for {} {}", w_name, input_label(node, 2),
                                   to_string(ctx.shape(2)), x[1], x_name, to_string(x)));
    if (ctx.dtype(2) != ctx.dtype(0))
      throw TypeError(fmt::format("{} {} is {} but {} is {}", w_name, input_label(node, 2), dtype_name(ctx.dtype(2)),
                                  x_name, dtype_name(ctx.dtype(0))));
  }
  LossGeometry g{x[0], x[1], 1};
  for (size_t i = 2; i < x.size(); ++i) g.d *= x[i];
  return g;
}

// Shared by both ops: targets as int64, the per-element weights (0 where ignored) and the check that
// every counted target is a class index.
struct Targets {
  std::vector<int64_t> t;
  std::vector<double> w;
};

template <class T>
Targets read_targets(const Tensor& target, const Tensor* weight, std::optional<int64_t> ignore, int64_t c,
                     const Node& node) {
  Targets r;
  r.t = target.to_int64_vector();
  r.w.resize(r.t.size());
  const T* pw = weight ? weight->data<T>() : nullptr;
  for (size_t i = 0; i < r.t.size(); ++i) {
    const int64_t t = r.t[i];
    if (ignore && t == *ignore) {
      r.w[i] = 0.0;
      continue;
    }
    if (t < 0 || t >= c)
      throw InvalidArgument(fmt::format("target {} has value {} at element {}, outside the classes [0, {}){}",
                                        input_label(node, 1), t, i, c,
                                        ignore ? fmt::format(" (ignore_index is {})", *ignore) : std::string()));
    r.w[i] = pw ? static_cast<double>(load(pw[t])) : 1.0;
  }
  return r;
}

// Writes loss (per element l) reduced as asked into out.
template <class T>
void write_loss(const std::vector<double>& l, const std::vector<double>& w, Reduction red, T* out) {
  using C = compute_t<T>;
  if (red == Reduction::None) {
    for (size_t i = 0; i < l.size(); ++i) out[i] = store<T>(static_cast<C>(l[i]));
    return;
  }
  double sum = 0.0, wsum = 0.0;
  for (size_t i = 0; i < l.size(); ++i) {
    sum += l[i];
    wsum += w[i];
  }
  out[0] = store<T>(static_cast<C>(red == Reduction::Sum ? sum : sum / wsum));
}

std::optional<int64_t> ignore_index_of(const Node& node) {
  if (!node.has_attr("ignore_index")) return std::nullopt;
  return node.attr_int("ignore_index");
}

Shape loss_shape(const Shape& target, Reduction red) { return red == Reduction::None ? target : Shape{}; }

class NllLossKernel final : public Kernel {
 public:
  explicit NllLossKernel(const Node& n) : Kernel(n), reduction_(parse_reduction(n)), ignore_(ignore_index_of(n)) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    geo_ = check_inputs(ctx, node_, "input", "target", "weight");
    return {TensorMeta{ctx.dtype(0), loss_shape(ctx.shape(1), reduction_), false, Tensor()}};
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    dispatch(LossTypes{}, x.dtype(), fmt::format("input {}", input_label(node_, 0)), [&](auto tag) {
      using T = decltype(tag);
      const Targets tg =
          read_targets<T>(ctx.input(1), ctx.has_input(2) ? &ctx.input(2) : nullptr, ignore_, geo_.c, node_);
      const T* px = x.data<T>();
      std::vector<double> l(tg.t.size(), 0.0);
      for (int64_t n = 0; n < geo_.n; ++n)
        for (int64_t d = 0; d < geo_.d; ++d) {
          const size_t i = static_cast<size_t>(n * geo_.d + d);
          if (tg.w[i] == 0.0) continue;  // ignored (or zero weight): contributes 0, never reads x
          l[i] = -tg.w[i] * static_cast<double>(load(px[(n * geo_.c + tg.t[i]) * geo_.d + d]));
        }
      write_loss(l, tg.w, reduction_, ctx.output(0).data<T>());
    });
  }

 private:
  Reduction reduction_;
  std::optional<int64_t> ignore_;
  LossGeometry geo_;
};

class SoftmaxCrossEntropyKernel final : public Kernel {
 public:
  explicit SoftmaxCrossEntropyKernel(const Node& n)
      : Kernel(n), reduction_(parse_reduction(n)), ignore_(ignore_index_of(n)) {}

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    geo_ = check_inputs(ctx, node_, "scores", "labels", "weights");
    std::vector<TensorMeta> out{TensorMeta{ctx.dtype(0), loss_shape(ctx.shape(1), reduction_), false, Tensor()}};
    if (node_.outputs.size() > 1)  // the optional log_prob
      out.push_back(TensorMeta{ctx.dtype(0), ctx.shape(0), false, Tensor()});
    return out;
  }

  void compute(ComputeContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor* log_prob = ctx.outputs.size() > 1 && ctx.outputs[1] && ctx.outputs[1]->defined() ? ctx.outputs[1] : nullptr;
    dispatch(LossTypes{}, x.dtype(), fmt::format("scores {}", input_label(node_, 0)), [&](auto tag) {
      using T = decltype(tag);
      using C = compute_t<T>;
      const Targets tg =
          read_targets<T>(ctx.input(1), ctx.has_input(2) ? &ctx.input(2) : nullptr, ignore_, geo_.c, node_);
      const T* px = x.data<T>();
      T* plp = log_prob ? log_prob->data<T>() : nullptr;
      const int64_t cls = geo_.c, dd = geo_.d;
      std::vector<double> l(tg.t.size(), 0.0);
      // One log_softmax over C per (n, d); class c of it sits at stride D.
      parallel_for(geo_.n * dd, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, cls)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t i = b; i < e; ++i) {
                       const int64_t n = i / dd, d = i % dd;
                       const T* row = px + n * cls * dd + d;
                       const double shift = loss::log_sum_exp(row, cls, dd, [](T v) { return load(v); });
                       if (plp) {
                         T* out = plp + n * cls * dd + d;
                         for (int64_t c = 0; c < cls; ++c)
                           out[c * dd] = store<T>(static_cast<C>(static_cast<double>(load(row[c * dd])) - shift));
                       }
                       const size_t k = static_cast<size_t>(i);
                       if (tg.w[k] != 0.0) l[k] = -tg.w[k] * (static_cast<double>(load(row[tg.t[k] * dd])) - shift);
                     }
                   });
      write_loss(l, tg.w, reduction_, ctx.output(0).data<T>());
    });
  }

 private:
  Reduction reduction_;
  std::optional<int64_t> ignore_;
  LossGeometry geo_;
};

// Both ops appeared in opset 12; version 13 only added bfloat16 and double, accepted by both here.
const KernelRegistrar kRegistrars[] = {
    register_kernel<NllLossKernel, LossTypes>("NegativeLogLikelihoodLoss", 12),
    register_kernel<SoftmaxCrossEntropyKernel, LossTypes>("SoftmaxCrossEntropyLoss", 12),
};

}  // namespace

}  // namespace kiln

// ai.kiln.Attention, what the attention fusion (ir/fusion.h) writes for MatMul(softmax(scores), V)
// with scores = MatMul(Q, Kt), scaled, biased or masked (attention_common.h): each block of query
// rows takes its scores from one product into a per-thread buffer, its softmax there, and its
// output rows from a second product. With a second output (what the fusion writes for a training
// graph) the probabilities are written there when attention_common.h's keep_probabilities says so,
// for the backward to reuse; otherwise the [.., Sq, Sk] probabilities never reach memory.
#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/attention_common.h"
#include "kernels/cpu/low_precision.h"

namespace kiln {
namespace {

using attention::Attrs;
using attention::Geometry;

class Attention final : public Kernel {
 public:
  using Kernel::Kernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    geometry_ = attention::check("Attention", ctx, 3, 4);
    attrs_ = attention::attrs_of(node_);
    bool dynamic = false;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) dynamic = dynamic || (ctx.has_input(i) && ctx.input(i).dynamic);
    std::vector<TensorMeta> out{
        {ctx.dtype(0), geometry_.stored({geometry_.sq(), geometry_.dv()}, geometry_.perm_y()), dynamic, Tensor()}};
    keep_ = node_.outputs.size() > 1 && !node_.outputs[1].empty() &&
            attention::keep_probabilities("Attention", node_, geometry_, ctx.dtype(0));
    bf16_products_ = attention::bf16_products_apply(geometry_, ctx.dtype(0));
    if (node_.outputs.size() > 1)
      out.push_back(
          {ctx.dtype(0), keep_ ? geometry_.with_batch({geometry_.sq(), geometry_.sk()}) : Shape{0}, dynamic, Tensor()});
    return out;
  }

  void compute(ComputeContext& ctx) override {
    if (ctx.output(0).numel() == 0) return;
    switch (ctx.input(0).dtype()) {
      case DType::Float32:
        return run<float>(ctx);
      case DType::Float64:
        return run<double>(ctx);
      case DType::BFloat16:
        return run_16_bit<BFloat16>(ctx);
      default:
        return run_16_bit<Half>(ctx);
    }
  }

 private:
  // Tasks are (batch item, block of query rows), split across threads.
  template <class T>
  void run(ComputeContext& ctx) {
    const Geometry& g = geometry_;
    const T* q = ctx.input(0).data<T>();
    const T* kt = ctx.input(1).data<T>();
    const T* v = ctx.input(2).data<T>();
    const bool* mask = ctx.has_input(3) ? ctx.input(3).data<bool>() : nullptr;
    const T* bias = ctx.has_input(4) ? ctx.input(4).data<T>() : nullptr;
    T* y = ctx.output(0).data<T>();
    T* kept = keep_ ? ctx.output(1).data<T>() : nullptr;
    const int64_t sq = g.sq(), sk = g.sk(), dv = g.dv(), bq = g.block_rows(attrs_.block_rows);
    if (sk == 0) {
      std::fill(y, y + ctx.output(0).numel(), T(0));
      return;
    }
    const int64_t blocks = (sq + bq - 1) / bq;
    const attention::Spread &sq_ = g.q(), &skt = g.kt(), &sv = g.v(), &sy = g.y();
    attention::parallel_chunks<T>(g.items() * blocks, kept ? 0 : bq * sk, [&](T* buffer, int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t item = task / blocks, r0 = task % blocks * bq, rows = std::min(bq, sq - r0);
        const size_t at = static_cast<size_t>(item);
        T* p = kept ? kept + (item * sq + r0) * sk : buffer;
        attention::probabilities(g, attrs_, q + sq_.item[at] + r0 * sq_.row, sq_.row, kt + skt.item[at], skt.ld(),
                                 skt.trans(), mask, bias, item, r0, rows, p);
        attention::gemm(false, false, rows, dv, sk, T(1), p, sk, v + sv.item[at], sv.row, T(0),
                        y + sy.item[at] + r0 * sy.row, sy.row);
      }
    });
  }

  // 16-bit Q, Kt and V (S: BFloat16 or Half, as mixed precision casts them): each task widens what
  // it reads into its thread's float32 buffers (an item's Kt and V once for its blocks), computes
  // the block as run<float> does, and rounds its rows of Y, and of P when kept, once. Every 16-bit
  // value is exact in float32, so the outputs are those of the float32 kernel on widened operands,
  // rounded, without widening whole tensors into memory first. The bias may be S or float32.
  template <class S>
  void run_16_bit(ComputeContext& ctx) {
    const Tensor* bias = ctx.has_input(4) ? &ctx.input(4) : nullptr;
    if constexpr (std::is_same_v<S, BFloat16>) {
      if (bf16_products_)
        return attention::bf16_forward(products_, geometry_, attrs_, ctx.input(0).data<S>(), ctx.input(1).data<S>(),
                                       ctx.input(2).data<S>(), ctx.has_input(3) ? ctx.input(3).data<bool>() : nullptr,
                                       bias, ctx.output(0).data<S>(), keep_ ? ctx.output(1).data<S>() : nullptr);
    }
    attention::visit_bias<S>(bias, [&](const auto* b) { run_16_bit<S>(ctx, b); });
  }

  template <class S, class B>
  void run_16_bit(ComputeContext& ctx, const B* bias) {
    const Geometry& g = geometry_;
    const S* q = ctx.input(0).data<S>();
    const S* kt = ctx.input(1).data<S>();
    const S* v = ctx.input(2).data<S>();
    const bool* mask = ctx.has_input(3) ? ctx.input(3).data<bool>() : nullptr;
    S* y = ctx.output(0).data<S>();
    S* kept = keep_ ? ctx.output(1).data<S>() : nullptr;
    const int64_t sq = g.sq(), sk = g.sk(), d = g.d(), dv = g.dv(), bq = g.block_rows(attrs_.block_rows);
    if (sk == 0) {
      std::fill(y, y + ctx.output(0).numel(), S{});
      return;
    }
    const int64_t blocks = (sq + bq - 1) / bq;
    const int64_t per_chunk = bq * sk + bq * d + d * sk + sk * dv + bq * dv;
    const attention::Spread &sq_ = g.q(), &skt = g.kt(), &sv = g.v(), &sy = g.y();
    const int64_t ldkt = skt.trans() ? d : sk;  // the widened Kt (or K) of an item
    attention::parallel_chunks<float>(g.items() * blocks, per_chunk, [&](float* buffer, int64_t begin, int64_t end) {
      float* p = buffer;
      float* q_rows = p + bq * sk;
      float* kt_item = q_rows + bq * d;
      float* v_item = kt_item + d * sk;
      float* y_rows = v_item + sk * dv;
      int64_t widened = -1;  // the item whose Kt and V are in kt_item and v_item
      for (int64_t task = begin; task < end; ++task) {
        const int64_t item = task / blocks, r0 = task % blocks * bq, rows = std::min(bq, sq - r0);
        const size_t at = static_cast<size_t>(item);
        if (item != widened) {
          if (skt.trans()) attention::widen_rows(kt + skt.item[at], skt.ld(), kt_item, sk, d);
          else attention::widen_rows(kt + skt.item[at], skt.row, kt_item, d, sk);
          attention::widen_rows(v + sv.item[at], sv.row, v_item, sk, dv);
          widened = item;
        }
        attention::widen_rows(q + sq_.item[at] + r0 * sq_.row, sq_.row, q_rows, rows, d);
        attention::probabilities(g, attrs_, q_rows, d, kt_item, ldkt, skt.trans(), mask, bias, item, r0, rows, p);
        if (kept) narrow_values(p, kept + (item * sq + r0) * sk, rows * sk);
        attention::gemm(false, false, rows, dv, sk, 1.f, p, sk, v_item, dv, 0.f, y_rows, dv);
        attention::narrow_rows(y_rows, y + sy.item[at] + r0 * sy.row, sy.row, rows, dv);
      }
    });
  }

  Geometry geometry_;
  Attrs attrs_;
  bool keep_ = false;
  bool bf16_products_ = false;  // attention_bf16.h's path
  attention::Bf16Products products_;
};

const KernelRegistrar reg({kKilnDomain, "Attention", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                          [](const Node& n) { return std::make_unique<Attention>(n); });
const KernelRegistrar reg_low({kKilnDomain, "Attention", 1, kMaxOpset, {DType::BFloat16, DType::Float16}},
                              [](const Node& n) { return std::make_unique<Attention>(n); });
const OpDocRegistrar doc(
    {kKilnDomain,
     "Attention",
     "Attention's scores, softmax and weighted values as one kernel: what the attention fusion writes for "
     "MatMul(Softmax(Z), V) with Z from MatMul(Q, Kt), scaled, plus an additive bias or under a Where mask. The "
     "probabilities are made a block of query rows at a time in a per-thread buffer, and stored only when a "
     "training graph's backward keeps them.",
     {"Q: [.., Sq, D], float32, float64, bfloat16 or float16 (computed in float32)",
      "Kt: [.., D, Sk], the keys transposed", "V: [.., Sk, Dv]", "mask (optional): bool, broadcast to [.., Sq, Sk]",
      "bias (optional): Q's dtype (or float32 beside 16-bit operands), broadcast to [.., Sq, Sk]"},
     {"Y: [.., Sq, Dv], the batch dims of all inputs broadcast",
      "P (optional): the probabilities [.., Sq, Sk] for AttentionGrad when kept, else an empty [0]"},
     "attributes scale (default 1), fill, fill_where (1: the fill goes where the mask is true; 0: where false), "
     "probabilities (\"auto\": P kept when it takes at most 64 MiB, \"keep\", \"recompute\"), block_rows (query "
     "rows per block; 0, the default: 262144 / Sk, at least 8), perm_q, perm_kt, perm_v (the node reads Q as "
     "Transpose(input, perm_q), likewise Kt and V; Q's and V's last axis stays the stored last one, Kt's D or Sk "
     "axis does) and perm_y (the node writes Transpose(Y, p) for p the inverse of perm_y, Dv last): the layouts "
     "fold_views_into_attention folds the exporters' head-splitting Transposes into. "
     "Z = fill where mask == fill_where, else scale * (Q Kt) + bias; Y = softmax(Z along Sk) V"});

}  // namespace
}  // namespace kiln

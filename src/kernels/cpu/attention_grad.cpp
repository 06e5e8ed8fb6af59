// ai.kiln.AttentionGrad(dY, Q, Kt, V, mask, bias, P) -> dQ, dKt, dV [, dZ]: the gradient of
// ai.kiln.Attention (attention_fused.cpp). Per batch item, a block of query rows at a time, it
// reads the block's probabilities from P when the forward kept them (P not empty), else
// recomputes them from Q and Kt, then
//   dP = dY V^T,  dZ = P (dP - rowsum(P dP)) (0 where the mask filled),
//   dV += P^T dY,  dQ = scale dZ Kt^T,  dKt += scale Q^T dZ,
// with dP (and P when recomputed) in per-thread buffers of block x Sk elements, never in the arena.
// Items are split across threads (each item's dKt and dV are summed over its blocks by one
// thread; a single item runs on one thread). The outputs have the full broadcast batch; the gradient rule sums them
// back to each input's shape. With a fourth output (the bias needs a gradient) dZ is written out too, [.., Sq, Sk].
#include <cstring>

#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/attention_common.h"
#include "kernels/cpu/low_precision.h"

namespace kiln {
namespace {

using attention::Attrs;
using attention::Geometry;

class AttentionGrad final : public Kernel {
 public:
  using Kernel::Kernel;

  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& dy = ctx.input(0);
    InferContext forward{
        ctx.node, ctx.opset, {ctx.inputs.begin() + 1, ctx.inputs.begin() + std::min<long>(6, long(ctx.inputs.size()))}};
    geometry_ = attention::check("AttentionGrad", forward, 3, 4);
    attrs_ = attention::attrs_of(node_);
    const Geometry& g = geometry_;
    const Shape y = g.stored({g.sq(), g.dv()}, g.perm_y());
    if (dy.dtype != ctx.dtype(1) || dy.shape != y)
      throw ShapeError(fmt::format("AttentionGrad: dY must be {}{} (the forward's output), got {}{}",
                                   dtype_name(ctx.dtype(1)), to_string(y), dtype_name(dy.dtype), to_string(dy.shape)));
    kept_ = ctx.has_input(6) && numel(ctx.shape(6)) > 0;
    const Shape probs = g.with_batch({g.sq(), g.sk()});
    if (kept_ && (ctx.shape(6) != probs || ctx.dtype(6) != dy.dtype))
      throw ShapeError(fmt::format("AttentionGrad: P must be empty or {}{} (the forward's probabilities), got {}{}",
                                   dtype_name(dy.dtype), to_string(probs), dtype_name(ctx.dtype(6)),
                                   to_string(ctx.shape(6))));
    const DType t = dy.dtype;
    bf16_products_ = attention::bf16_products_apply(g, t);
    // The gradients in their operands' layouts (perm_q, perm_kt, perm_v), over the full batch.
    const Node& n = node_;
    const auto perm = [&](const char* name, size_t input) {
      return g.full_batch(attention::perm_of("AttentionGrad", n, name, ctx.shape(input).size()));
    };
    const std::vector<int64_t> pq = perm("perm_q", 1), pkt = perm("perm_kt", 2), pv = perm("perm_v", 3);
    dq_ = g.written("AttentionGrad", n, "dQ", {g.sq(), g.d()}, pq);
    dkt_ = g.written("AttentionGrad", n, "dKt", {g.d(), g.sk()}, pkt);
    dv_ = g.written("AttentionGrad", n, "dV", {g.sk(), g.dv()}, pv);
    std::vector<TensorMeta> out{
        {t, g.stored({g.sq(), g.d()}, pq)}, {t, g.stored({g.d(), g.sk()}, pkt)}, {t, g.stored({g.sk(), g.dv()}, pv)}};
    if (node_.outputs.size() > 3) out.push_back({t, g.with_batch({g.sq(), g.sk()})});
    return out;
  }

  void compute(ComputeContext& ctx) override {
    if (geometry_.sq() == 0 || geometry_.sk() == 0) {  // no scores: every gradient is zero
      for (size_t i = 0; i < ctx.outputs.size(); ++i)
        if (ctx.outputs[i] != nullptr && ctx.output(i).defined())
          std::memset(ctx.output(i).raw_data(), 0,
                      static_cast<size_t>(ctx.output(i).numel()) * dtype_size(ctx.output(i).dtype()));
      return;
    }
    switch (ctx.input(1).dtype()) {
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
  template <class T>
  void run(ComputeContext& ctx) {
    const Geometry& g = geometry_;
    const T* dy = ctx.input(0).data<T>();
    const T* q = ctx.input(1).data<T>();
    const T* kt = ctx.input(2).data<T>();
    const T* v = ctx.input(3).data<T>();
    const bool* mask = ctx.has_input(4) ? ctx.input(4).data<bool>() : nullptr;
    const T* bias = ctx.has_input(5) ? ctx.input(5).data<T>() : nullptr;
    const T* kept = kept_ ? ctx.input(6).data<T>() : nullptr;
    T* dq = ctx.output(0).data<T>();
    T* dkt = ctx.output(1).data<T>();
    T* dv_out = ctx.output(2).data<T>();
    T* dz = ctx.outputs.size() > 3 && ctx.outputs[3] != nullptr && ctx.output(3).defined() ? ctx.output(3).data<T>()
                                                                                           : nullptr;
    const int64_t sq = g.sq(), sk = g.sk(), d = g.d(), dv = g.dv(), bq = g.block_rows(attrs_.block_rows);
    const T scale = static_cast<T>(attrs_.scale);
    const attention::Spread &sq_ = g.q(), &skt = g.kt(), &sv = g.v(), &sdy = g.y();
    attention::parallel_chunks<T>(g.items(), (kept ? 1 : 2) * bq * sk, [&](T* buffers, int64_t begin, int64_t end) {
      T* dp = buffers;
      T* recomputed = buffers + bq * sk;
      for (int64_t item = begin; item < end; ++item) {
        const size_t at = static_cast<size_t>(item);
        const T* q_item = q + sq_.item[at];
        const T* kt_item = kt + skt.item[at];
        const T* v_item = v + sv.item[at];
        T* dkt_item = dkt + dkt_.item[at];
        T* dv_item = dv_out + dv_.item[at];
        for (int64_t r0 = 0; r0 < sq; r0 += bq) {
          const int64_t rows = std::min(bq, sq - r0);
          const T beta = r0 == 0 ? T(0) : T(1);  // the first block writes dKt and dV, the others add
          const T* dy_block = dy + sdy.item[at] + r0 * sdy.row;
          const T* q_rows = q_item + r0 * sq_.row;
          const T* p = kept ? kept + (item * sq + r0) * sk : recomputed;
          if (!kept)
            attention::probabilities(g, attrs_, q_rows, sq_.row, kt_item, skt.ld(), skt.trans(), mask, bias, item, r0,
                                     rows, recomputed);
          if (dv == 0) std::fill(dp, dp + rows * sk, T(0));
          else attention::gemm(false, true, rows, sk, dv, T(1), dy_block, sdy.row, v_item, sv.row, T(0), dp, sk);
          attention::gemm(true, false, sk, dv, rows, T(1), p, sk, dy_block, sdy.row, beta, dv_item, dv_.row);
          attention::scores_gradient(g, attrs_, mask, item, r0, rows, p, dp);
          if (dz) std::copy(dp, dp + rows * sk, dz + (item * sq + r0) * sk);
          // dQ = scale dZ Kt^T (Kt, or K when trans: dZ K); dKt = scale Q^T dZ (or dK = scale dZ^T Q).
          attention::gemm(false, !skt.trans(), rows, d, sk, scale, dp, sk, kt_item, skt.ld(), T(0),
                          dq + dq_.item[at] + r0 * dq_.row, dq_.row);
          if (dkt_.trans())
            attention::gemm(true, false, sk, d, rows, scale, dp, sk, q_rows, sq_.row, beta, dkt_item, dkt_.ld());
          else attention::gemm(true, false, d, sk, rows, scale, q_rows, sq_.row, dp, sk, beta, dkt_item, dkt_.row);
        }
      }
    });
  }

  // 16-bit operands (S: BFloat16 or Half): as run<float>, on float32 copies of what each step reads
  // (an item's Kt and V, a block's rows of Q, dY and the kept P) in the thread's buffers, with dKt and
  // dV summed over the item's blocks in float32 and every output rounded once: the float32 kernel's
  // values on widened operands, rounded, as attention_fused.cpp's run_16_bit. The bias may be S or
  // float32.
  template <class S>
  void run_16_bit(ComputeContext& ctx) {
    const Tensor* bias = ctx.has_input(5) ? &ctx.input(5) : nullptr;
    if constexpr (std::is_same_v<S, BFloat16>) {
      if (bf16_products_) {
        const bool dz = ctx.outputs.size() > 3 && ctx.outputs[3] != nullptr && ctx.output(3).defined();
        return attention::bf16_backward(
            products_, geometry_, attrs_, ctx.input(0).data<S>(), ctx.input(1).data<S>(), ctx.input(2).data<S>(),
            ctx.input(3).data<S>(), ctx.has_input(4) ? ctx.input(4).data<bool>() : nullptr, bias,
            kept_ ? ctx.input(6).data<S>() : nullptr, ctx.output(0).data<S>(), ctx.output(1).data<S>(),
            ctx.output(2).data<S>(), dz ? ctx.output(3).data<S>() : nullptr);
      }
    }
    attention::visit_bias<S>(bias, [&](const auto* b) { run_16_bit<S>(ctx, b); });
  }

  template <class S, class B>
  void run_16_bit(ComputeContext& ctx, const B* bias) {
    const Geometry& g = geometry_;
    const S* dy = ctx.input(0).data<S>();
    const S* q = ctx.input(1).data<S>();
    const S* kt = ctx.input(2).data<S>();
    const S* v = ctx.input(3).data<S>();
    const bool* mask = ctx.has_input(4) ? ctx.input(4).data<bool>() : nullptr;
    const S* kept = kept_ ? ctx.input(6).data<S>() : nullptr;
    S* dq = ctx.output(0).data<S>();
    S* dkt = ctx.output(1).data<S>();
    S* dv_out = ctx.output(2).data<S>();
    S* dz = ctx.outputs.size() > 3 && ctx.outputs[3] != nullptr && ctx.output(3).defined() ? ctx.output(3).data<S>()
                                                                                           : nullptr;
    const int64_t sq = g.sq(), sk = g.sk(), d = g.d(), dv = g.dv(), bq = g.block_rows(attrs_.block_rows);
    const float scale = static_cast<float>(attrs_.scale);
    const attention::Spread &sq_ = g.q(), &skt = g.kt(), &sv = g.v(), &sdy = g.y();
    const bool trans = skt.trans();       // Kt read from K's layout, and dKt written in it
    const int64_t ldkt = trans ? d : sk;  // the widened Kt (or K) of an item, and its gradient
    // Per thread: dP, P, the item's Kt, V and their gradients, a block's rows of Q, dY and dQ.
    const int64_t per_chunk = 2 * bq * sk + 2 * (d * sk + sk * dv) + bq * (d + dv + d);
    attention::parallel_chunks<float>(g.items(), per_chunk, [&](float* buffers, int64_t begin, int64_t end) {
      float* dp = buffers;
      float* p = dp + bq * sk;
      float* kt_item = p + bq * sk;
      float* v_item = kt_item + d * sk;
      float* dkt_item = v_item + sk * dv;
      float* dv_item = dkt_item + d * sk;
      float* q_rows = dv_item + sk * dv;
      float* dy_rows = q_rows + bq * d;
      float* dq_rows = dy_rows + bq * dv;
      for (int64_t item = begin; item < end; ++item) {
        const size_t at = static_cast<size_t>(item);
        if (trans) attention::widen_rows(kt + skt.item[at], skt.ld(), kt_item, sk, d);
        else attention::widen_rows(kt + skt.item[at], skt.row, kt_item, d, sk);
        attention::widen_rows(v + sv.item[at], sv.row, v_item, sk, dv);
        for (int64_t r0 = 0; r0 < sq; r0 += bq) {
          const int64_t rows = std::min(bq, sq - r0);
          const float beta = r0 == 0 ? 0.f : 1.f;  // the first block writes dKt and dV, the others add
          attention::widen_rows(q + sq_.item[at] + r0 * sq_.row, sq_.row, q_rows, rows, d);
          attention::widen_rows(dy + sdy.item[at] + r0 * sdy.row, sdy.row, dy_rows, rows, dv);
          if (kept) widen_values(kept + (item * sq + r0) * sk, p, rows * sk);
          else attention::probabilities(g, attrs_, q_rows, d, kt_item, ldkt, trans, mask, bias, item, r0, rows, p);
          if (dv == 0) std::fill(dp, dp + rows * sk, 0.f);
          else attention::gemm(false, true, rows, sk, dv, 1.f, dy_rows, dv, v_item, dv, 0.f, dp, sk);
          attention::gemm(true, false, sk, dv, rows, 1.f, p, sk, dy_rows, dv, beta, dv_item, dv);
          attention::scores_gradient(g, attrs_, mask, item, r0, rows, p, dp);
          if (dz) narrow_values(dp, dz + (item * sq + r0) * sk, rows * sk);
          attention::gemm(false, !trans, rows, d, sk, scale, dp, sk, kt_item, ldkt, 0.f, dq_rows, d);
          attention::narrow_rows(dq_rows, dq + dq_.item[at] + r0 * dq_.row, dq_.row, rows, d);
          if (trans) attention::gemm(true, false, sk, d, rows, scale, dp, sk, q_rows, d, beta, dkt_item, d);
          else attention::gemm(true, false, d, sk, rows, scale, q_rows, d, dp, sk, beta, dkt_item, sk);
        }
        if (trans) attention::narrow_rows(dkt_item, dkt + dkt_.item[at], dkt_.ld(), sk, d);
        else attention::narrow_rows(dkt_item, dkt + dkt_.item[at], dkt_.row, d, sk);
        attention::narrow_rows(dv_item, dv_out + dv_.item[at], dv_.row, sk, dv);
      }
    });
  }

  Geometry geometry_;
  Attrs attrs_;
  attention::Spread dq_, dkt_, dv_;  // where each item's gradients go (their operands' layouts)
  bool kept_ = false;
  bool bf16_products_ = false;  // attention_bf16.h's path
  attention::Bf16Products products_;
};

const KernelRegistrar reg({kKilnDomain, "AttentionGrad", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                          [](const Node& n) { return std::make_unique<AttentionGrad>(n); });
const KernelRegistrar reg_low({kKilnDomain, "AttentionGrad", 1, kMaxOpset, {DType::BFloat16, DType::Float16}},
                              [](const Node& n) { return std::make_unique<AttentionGrad>(n); });
const OpDocRegistrar doc({kKilnDomain,
                          "AttentionGrad",
                          "The gradient of ai.kiln.Attention in one kernel, a block of query rows at a time: the "
                          "probabilities read from the forward's P when it kept them, else recomputed; their "
                          "gradient never written to memory (unless the bias needs it).",
                          {"dY: the gradient of Attention's Y",
                           "Q, Kt, V, mask (optional), bias (optional): Attention's inputs",
                           "P (optional): Attention's kept probabilities; empty or absent: recomputed"},
                          {"dQ, dKt, dV: [batch.., Sq, D], [batch.., D, Sk], [batch.., Sk, Dv] over the full broadcast "
                           "batch",
                           "dZ (optional): the gradient of the biased scores, [batch.., Sq, Sk]"},
                          "attributes as Attention's: dY in Y's layout (perm_y), dQ, dKt, dV in their operands' "
                          "(perm_q, perm_kt, perm_v), the batch dims they broadcast over leading. P = softmax(Z); dZ = "
                          "P (dY V^T - rowsum(P dY V^T)), 0 where the "
                          "mask filled; dQ = scale dZ Kt^T, dKt = scale Q^T dZ, dV = P^T dY"});

}  // namespace
}  // namespace kiln

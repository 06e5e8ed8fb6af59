// ai.kiln.Attention, what the attention fusion (ir/fusion.h) writes for MatMul(softmax(scores), V)
// with scores = MatMul(Q, Kt), scaled, biased or masked (attention_common.h): each block of query
// rows takes its scores from one product into a per-thread buffer, its softmax there, and its
// output rows from a second product. With a second output (what the fusion writes for a training
// graph) the probabilities are written there when attention_common.h's keep_probabilities says so,
// for the backward to reuse; otherwise the [.., Sq, Sk] probabilities never reach memory.
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
        {ctx.dtype(0), geometry_.with_batch({geometry_.sq(), geometry_.dv()}), dynamic, Tensor()}};
    keep_ = node_.outputs.size() > 1 && !node_.outputs[1].empty() &&
            attention::keep_probabilities("Attention", node_, geometry_, ctx.dtype(0));
    if (node_.outputs.size() > 1)
      out.push_back(
          {ctx.dtype(0), keep_ ? geometry_.with_batch({geometry_.sq(), geometry_.sk()}) : Shape{0}, dynamic, Tensor()});
    return out;
  }

  void compute(ComputeContext& ctx) override {
    if (ctx.output(0).numel() == 0) return;
    if (ctx.input(0).dtype() == DType::Float32) return run<float>(ctx);
    run<double>(ctx);
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
    attention::parallel_chunks<T>(g.items() * blocks, kept ? 0 : bq * sk, [&](T* buffer, int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t item = task / blocks, r0 = task % blocks * bq, rows = std::min(bq, sq - r0);
        T* p = kept ? kept + (item * sq + r0) * sk : buffer;
        attention::probabilities(g, attrs_, q, kt, mask, bias, item, r0, rows, p);
        attention::gemm(false, false, rows, dv, sk, T(1), p, sk, v + g.v().item[static_cast<size_t>(item)], dv, T(0),
                        y + (item * sq + r0) * dv, dv);
      }
    });
  }

  Geometry geometry_;
  Attrs attrs_;
  bool keep_ = false;
};

const KernelRegistrar reg({kKilnDomain, "Attention", 1, kMaxOpset, {DType::Float32, DType::Float64}},
                          [](const Node& n) { return std::make_unique<Attention>(n); });
const KernelRegistrar reg_low({kKilnDomain, "Attention", 1, kMaxOpset, {DType::BFloat16, DType::Float16}},
                              via_float32([](const Node& n) { return std::make_unique<Attention>(n); }));
const OpDocRegistrar doc(
    {kKilnDomain,
     "Attention",
     "Attention's scores, softmax and weighted values as one kernel: what the attention fusion writes for "
     "MatMul(Softmax(Z), V) with Z from MatMul(Q, Kt), scaled, plus an additive bias or under a Where mask. The "
     "probabilities are made a block of query rows at a time in a per-thread buffer, and stored only when a "
     "training graph's backward keeps them.",
     {"Q: [.., Sq, D], float32 or float64", "Kt: [.., D, Sk], the keys transposed", "V: [.., Sk, Dv]",
      "mask (optional): bool, broadcast to [.., Sq, Sk]", "bias (optional): Q's dtype, broadcast to [.., Sq, Sk]"},
     {"Y: [.., Sq, Dv], the batch dims of all inputs broadcast",
      "P (optional): the probabilities [.., Sq, Sk] for AttentionGrad when kept, else an empty [0]"},
     "attributes scale (default 1), fill, fill_where (1: the fill goes where the mask is true; 0: where false), "
     "probabilities (\"auto\": P kept when it takes at most 64 MiB, \"keep\", \"recompute\"), block_rows (query "
     "rows per block; 0, the default: 262144 / Sk, at least 8). "
     "Z = fill where mask == fill_where, else scale * (Q Kt) + bias; Y = softmax(Z along Sk) V"});

}  // namespace
}  // namespace kiln

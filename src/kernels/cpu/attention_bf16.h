// Fused attention on oneDNN's bfloat16 products (AMX-BF16, AVX512-BF16), for mixed precision's
// bfloat16 Q, Kt and V where bf16_native() holds (low_precision.h). Its products are what the
// bfloat16 MatMuls of the unfused graph would compute, batched over the items of a chunk: one
// oneDNN call per product and chunk instead of a float32 product per block of rows (at bert's
// 128 x 128 x 64 an item's product is too small for the bfloat16 kernels to pay for their
// set-up). The scores of a chunk of items ([chunk, Sq, Sk] float32, at most kChunkBytes) are in
// per-call scratch memory; softmax, mask, bias and the scores' gradient run in float32 on them, and
// the probabilities and the scores' gradient are rounded to bfloat16 to enter the next products,
// as a bfloat16 autocast does (PyTorch's). Used where every operand holds its items one after
// another (no broadcast batch dims, no perm attributes); attention_fused.cpp and attention_grad.cpp fall back to
// float32 products on widened blocks elsewhere.
#pragma once

#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/attention_common.h"

namespace kiln::attention {

// Bytes of float32 scores a chunk of items may take.
constexpr int64_t kChunkBytes = int64_t{16} << 20;

// Whether the bfloat16 products take this node: bfloat16 operands, bf16_native(), no views (perm
// attributes), and Q, Kt, V each holding its items one after another.
bool bf16_products_apply(const Geometry& g, DType dtype);

// The batched products of one node, made on first use for each shape and chunk size and kept (under
// a lock: a plan's kernel may run in more than one thread).
class Bf16Products {
 public:
  // C[i] = alpha A[i] B[i] for i < batch: A [batch, m, k] and B [batch, k, n] bfloat16 with element
  // strides a and b (batch, row, column), C [batch, m, n] contiguous, float32 or bfloat16.
  struct Spec {
    int64_t m, n, k;
    Strides a, b;
    bool bf16_out;
    float alpha;
    auto operator<=>(const Spec&) const = default;
  };
  void run(const Spec& spec, int64_t batch, const void* a, const void* b, void* c);

 private:
  struct Made {
    dnnl::matmul product;
    dnnl::memory::desc a, b, c;
  };
  std::mutex lock_;
  std::map<std::pair<Spec, int64_t>, Made> made_;
};

// Items per chunk: as many as fit kChunkBytes of float32 scores, at least one.
inline int64_t chunk_items(const Geometry& g) {
  return std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(1, g.sq() * g.sk() * 4), 1,
                             std::max<int64_t>(1, g.items()));
}

// Forward: Y (bfloat16) and, when `kept` is not null, P (bfloat16). `bias`: null, or float32 or
// bfloat16 (visit_bias).
void bf16_forward(Bf16Products& products, const Geometry& g, const Attrs& a, const BFloat16* q, const BFloat16* kt,
                  const BFloat16* v, const bool* mask, const Tensor* bias, BFloat16* y, BFloat16* kept);

// Backward: dQ, dKt, dV (bfloat16) and dZ when not null, from P (`kept`, or recomputed when null).
void bf16_backward(Bf16Products& products, const Geometry& g, const Attrs& a, const BFloat16* dy, const BFloat16* q,
                   const BFloat16* kt, const BFloat16* v, const bool* mask, const Tensor* bias, const BFloat16* kept,
                   BFloat16* dq, BFloat16* dkt, BFloat16* dv, BFloat16* dz);

}  // namespace kiln::attention

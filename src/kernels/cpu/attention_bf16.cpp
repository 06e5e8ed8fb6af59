#include "kernels/cpu/attention_bf16.h"

#include <algorithm>

#include "core/parallel.h"
#include "core/scratch.h"
#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/low_precision.h"

namespace kiln::attention {
namespace {

using dt = dnnl::memory::data_type;

bool packed(const Spread& s, int64_t size) {
  for (size_t i = 0; i < s.item.size(); ++i)
    if (s.item[i] != static_cast<int64_t>(i) * size) return false;
  return true;
}

template <class T>
T* take(int64_t n) {
  return static_cast<T*>(scratch_take(static_cast<size_t>(std::max<int64_t>(1, n)) * sizeof(T)));
}

// Plain [batch, rows, cols] strides, and those of the transpose of a plain [batch, cols, rows].
Strides plain(int64_t rows, int64_t cols) { return {rows * cols, cols, 1}; }
Strides transposed(int64_t rows, int64_t cols) { return {rows * cols, 1, rows}; }

// The rows of items [i0, i0 + n) of float32 scaled scores into probabilities, rounded to bfloat16
// into p16 ([n, Sq, Sk]); items split across threads.
template <class B>
void softmax_rows(const Geometry& g, const Attrs& a, const bool* mask, const B* bias, int64_t i0, int64_t n,
                  float* scores, BFloat16* p16) {
  const int64_t per_item = g.sq() * g.sk();
  parallel_for(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      float* s = scores + j * per_item;
      finish_rows(g, a, mask, bias, i0 + j, 0, g.sq(), s);
      narrow_values(s, p16 + j * per_item, per_item);
    }
  });
}

// Items [i0, i0 + n)'s probabilities into p16: their scaled scores from one batched product, then
// softmax_rows.
void probabilities_bf16(Bf16Products& products, const Geometry& g, const Attrs& a, const BFloat16* q,
                        const BFloat16* kt, const bool* mask, const Tensor* bias, int64_t i0, int64_t n, float* scores,
                        BFloat16* p16) {
  const int64_t sq = g.sq(), sk = g.sk(), d = g.d();
  products.run({sq, sk, d, plain(sq, d), plain(d, sk), false, static_cast<float>(a.scale)}, n, q + i0 * sq * d,
               kt + i0 * d * sk, scores);
  visit_bias<BFloat16>(bias, [&](const auto* b) { softmax_rows(g, a, mask, b, i0, n, scores, p16); });
}

}  // namespace

bool bf16_products_apply(const Geometry& g, DType dtype) {
  if (dtype != DType::BFloat16 || !bf16_native() || g.views()) return false;
  if (g.sq() == 0 || g.sk() == 0 || g.d() == 0 || g.dv() == 0 || g.items() == 0) return false;
  return packed(g.q(), g.sq() * g.d()) && packed(g.kt(), g.d() * g.sk()) && packed(g.v(), g.sk() * g.dv());
}

void Bf16Products::run(const Spec& spec, int64_t batch, const void* a, const void* b, void* c) {
  const auto key = std::pair{spec, batch};
  std::unique_lock guard(lock_);
  auto it = made_.find(key);
  if (it == made_.end()) {
    const dnnl::memory::desc ad = dnnl_util::strided_desc({batch, spec.m, spec.k}, spec.a, dt::bf16);
    const dnnl::memory::desc bd = dnnl_util::strided_desc({batch, spec.k, spec.n}, spec.b, dt::bf16);
    const dnnl::memory::desc cd = dnnl_util::plain_desc({batch, spec.m, spec.n}, spec.bf16_out ? dt::bf16 : dt::f32);
    dnnl::matmul made = dnnl_util::checked("a bfloat16 attention product", [&] {
      dnnl::primitive_attr attr;
      if (spec.alpha != 1.f) attr.set_output_scales(0, {spec.alpha});
      return dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), attr, dnnl_util::engine()));
    });
    it = made_.emplace(key, Made{std::move(made), ad, bd, cd}).first;
  }
  const Made m = it->second;  // handles: the map may grow once the lock is released
  guard.unlock();
  dnnl::engine& e = dnnl_util::engine();
  dnnl_util::execute(m.product,
                     {{DNNL_ARG_SRC, dnnl::memory(m.a, e, const_cast<void*>(a))},
                      {DNNL_ARG_WEIGHTS, dnnl::memory(m.b, e, const_cast<void*>(b))},
                      {DNNL_ARG_DST, dnnl::memory(m.c, e, c)}},
                     "a bfloat16 attention product");
}

void bf16_forward(Bf16Products& products, const Geometry& g, const Attrs& a, const BFloat16* q, const BFloat16* kt,
                  const BFloat16* v, const bool* mask, const Tensor* bias, BFloat16* y, BFloat16* kept) {
  const int64_t sq = g.sq(), sk = g.sk(), dv = g.dv(), chunk = chunk_items(g);
  float* scores = take<float>(chunk * sq * sk);
  BFloat16* p16 = kept != nullptr ? nullptr : take<BFloat16>(chunk * sq * sk);
  for (int64_t i0 = 0; i0 < g.items(); i0 += chunk) {
    const int64_t n = std::min(chunk, g.items() - i0);
    BFloat16* p = kept != nullptr ? kept + i0 * sq * sk : p16;
    probabilities_bf16(products, g, a, q, kt, mask, bias, i0, n, scores, p);
    products.run({sq, dv, sk, plain(sq, sk), plain(sk, dv), true, 1.f}, n, p, v + i0 * sk * dv, y + i0 * sq * dv);
  }
}

void bf16_backward(Bf16Products& products, const Geometry& g, const Attrs& a, const BFloat16* dy, const BFloat16* q,
                   const BFloat16* kt, const BFloat16* v, const bool* mask, const Tensor* bias, const BFloat16* kept,
                   BFloat16* dq, BFloat16* dkt, BFloat16* dv, BFloat16* dz) {
  const int64_t sq = g.sq(), sk = g.sk(), d = g.d(), ndv = g.dv(), chunk = chunk_items(g), per_item = sq * sk;
  const auto scale = static_cast<float>(a.scale);
  float* dp = take<float>(chunk * per_item);
  BFloat16* ds = take<BFloat16>(chunk * per_item);
  float* recomputed = kept != nullptr ? nullptr : take<float>(chunk * per_item);
  BFloat16* p16 = kept != nullptr ? nullptr : take<BFloat16>(chunk * per_item);
  float* wide = chunk_buffers<float>(chunk, per_item);  // an item's P in float32, per thread
  for (int64_t i0 = 0; i0 < g.items(); i0 += chunk) {
    const int64_t n = std::min(chunk, g.items() - i0);
    const BFloat16* p = kept != nullptr ? kept + i0 * per_item : p16;
    if (kept == nullptr) probabilities_bf16(products, g, a, q, kt, mask, bias, i0, n, recomputed, p16);
    // dP = dY V^T
    products.run({sq, sk, ndv, plain(sq, ndv), transposed(ndv, sk), false, 1.f}, n, dy + i0 * sq * ndv,
                 v + i0 * sk * ndv, dp);
    // dZ = P (dP - rowsum(P dP)), 0 where the mask filled; P widened an item at a time.
    parallel_chunks<float>(n, wide, per_item, [&](float* pj, int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        float* dpj = dp + j * per_item;
        widen_values(p + j * per_item, pj, per_item);
        scores_gradient(g, a, mask, i0 + j, 0, sq, pj, dpj);
        narrow_values(dpj, ds + j * per_item, per_item);
        if (dz != nullptr) narrow_values(dpj, dz + (i0 + j) * per_item, per_item);
      }
    });
    // dV = P^T dY, dQ = scale dZ Kt^T, dKt = scale Q^T dZ.
    products.run({sk, ndv, sq, transposed(sk, sq), plain(sq, ndv), true, 1.f}, n, p, dy + i0 * sq * ndv,
                 dv + i0 * sk * ndv);
    products.run({sq, d, sk, plain(sq, sk), transposed(sk, d), true, scale}, n, ds, kt + i0 * d * sk, dq + i0 * sq * d);
    products.run({d, sk, sq, transposed(d, sq), plain(sq, sk), true, scale}, n, q + i0 * sq * d, ds, dkt + i0 * d * sk);
  }
}

}  // namespace kiln::attention

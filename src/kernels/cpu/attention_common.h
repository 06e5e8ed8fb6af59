// What ai.kiln.Attention (attention_fused.cpp) and ai.kiln.AttentionGrad (attention_grad.cpp)
// share. Attention is attention's score-softmax-value chain as one kernel:
//   Z = fill where mask == fill_where, else scale * (Q Kt) + bias;   Y = softmax(Z) V
// with Q [..., Sq, D], Kt [..., D, Sk] (keys already transposed, as exporters write them), V [...,
// Sk, Dv], an optional bool mask and an optional float bias broadcast to [..., Sq, Sk], and batch
// dims broadcast across all of them (MatMul's and Where's rules). The kernels walk the queries in
// blocks of rows, each with its whole row of keys: a block's scores live in a per-thread buffer of
// block x Sk elements, never in the arena, and the backward recomputes them from Q and Kt instead
// of keeping the probabilities (Sq x Sk per head) from the forward.
#pragma once

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/scratch.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/low_precision.h"
#include "kernels/cpu/vector_math.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::attention {

struct Attrs {
  double scale = 1, fill = 0;
  bool fill_where = true;  // the fill goes where the mask is true, else where it is false
  int64_t block_rows = 0;  // query rows per block; 0: Geometry::block_rows decides
};

inline Attrs attrs_of(const Node& n) {
  return {n.attr_float("scale", 1.f), n.attr_float("fill", 0.f), n.attr_int("fill_where", 1) != 0,
          std::max<int64_t>(0, n.attr_int("block_rows", 0))};
}

// An operand broadcast over the scores [batch..., Sq, Sk]: its offset per batch item and its
// element steps along a row of queries and along the keys (0 where it repeats).
struct Spread {
  std::vector<int64_t> item;
  int64_t row = 0, col = 0;
  bool present = false;
};

// The shapes of one Attention node: the broadcast batch, the matrix sizes, and where each operand's
// matrix of every batch item starts.
class Geometry {
 public:
  Geometry() = default;
  // `q`, `kt`, `v`: the operands' shapes; `mask`, `bias`: null when absent. Throws ShapeError.
  Geometry(const char* op, const Shape& q, const Shape& kt, const Shape& v, const Shape* mask, const Shape* bias) {
    const auto describe = [&] {
      return fmt::format("Q{} Kt{} V{}{}{}", to_string(q), to_string(kt), to_string(v),
                         mask ? " mask" + to_string(*mask) : "", bias ? " bias" + to_string(*bias) : "");
    };
    if (q.size() < 2 || kt.size() < 2 || v.size() < 2)
      throw ShapeError(fmt::format("{}: Q, Kt and V must have rank >= 2, got {}", op, describe()));
    sq_ = q[q.size() - 2];
    d_ = q.back();
    sk_ = kt.back();
    dv_ = v.back();
    if (kt[kt.size() - 2] != d_ || v[v.size() - 2] != sk_)
      throw ShapeError(
          fmt::format("{}: Q [.., Sq, D], Kt [.., D, Sk] and V [.., Sk, Dv] do not agree: {}", op, describe()));
    const auto lead = [](const Shape& s, size_t keep) { return Shape(s.begin(), s.end() - static_cast<long>(keep)); };
    try {
      batch_ = broadcast_shapes(broadcast_shapes(lead(q, 2), lead(kt, 2)), lead(v, 2));
      for (const Shape* s : {mask, bias})
        if (s) batch_ = broadcast_shapes(batch_, lead(padded(*s), 2));
    } catch (const ShapeError&) {
      throw ShapeError(fmt::format("{}: the batch dims do not broadcast: {}", op, describe()));
    }
    items_ = numel(batch_);
    q_ = spread(q);
    kt_ = spread(kt);
    v_ = spread(v);
    for (auto [s, out] : {std::pair{mask, &mask_}, std::pair{bias, &bias_}}) {
      if (!s) continue;
      const Shape p = padded(*s);
      const int64_t rows = p[p.size() - 2], cols = p.back();
      if ((rows != 1 && rows != sq_) || (cols != 1 && cols != sk_))
        throw ShapeError(fmt::format("{}: the mask and the bias must broadcast to the scores [.., {}, {}]: {}", op, sq_,
                                     sk_, describe()));
      *out = spread(p);
      out->row = rows == 1 ? 0 : cols;
      out->col = cols == 1 ? 0 : 1;
      out->present = true;
    }
  }

  int64_t items() const { return items_; }
  int64_t sq() const { return sq_; }
  int64_t sk() const { return sk_; }
  int64_t d() const { return d_; }
  int64_t dv() const { return dv_; }
  const Spread& q() const { return q_; }
  const Spread& kt() const { return kt_; }
  const Spread& v() const { return v_; }
  const Spread& mask() const { return mask_; }
  const Spread& bias() const { return bias_; }
  Shape with_batch(std::initializer_list<int64_t> tail) const {
    Shape s = batch_;
    s.insert(s.end(), tail);
    return s;
  }
  // Query rows per block: `rows` when positive (the node's attribute block_rows), else 262144
  // scores per buffer (1 MiB of float32; at least 8 rows). Measured on gpt2's attention at 128 and
  // 512 tokens: smaller blocks cost the backward more in the dKt and dV products summed block by
  // block than they save in cache.
  int64_t block_rows(int64_t rows = 0) const {
    if (rows > 0) return rows;
    return std::clamp<int64_t>(262144 / std::max<int64_t>(1, sk_), 8, std::max<int64_t>(8, sq_));
  }

 private:
  static Shape padded(const Shape& s) {
    Shape p = s;
    while (p.size() < 2) p.insert(p.begin(), 1);
    return p;
  }
  // Offsets of each batch item's matrix in an operand of shape `s` (rank >= 2).
  Spread spread(const Shape& s) const {
    Spread r;
    r.item.resize(static_cast<size_t>(items_));
    const Strides own = contiguous_strides(s);
    const size_t rank = batch_.size(), lead = rank - (s.size() - 2);
    std::vector<int64_t> idx(rank, 0);
    for (int64_t i = 0; i < items_; ++i) {
      int64_t off = 0;
      for (size_t d = lead; d < rank; ++d)
        if (s[d - lead] != 1) off += idx[d] * own[d - lead];
      r.item[static_cast<size_t>(i)] = off;
      for (size_t d = rank; d-- > 0;) {
        if (++idx[d] < batch_[d]) break;
        idx[d] = 0;
      }
    }
    return r;
  }

  Shape batch_;
  int64_t items_ = 0, sq_ = 0, sk_ = 0, d_ = 0, dv_ = 0;
  Spread q_, kt_, v_, mask_, bias_;
};

// C = alpha op(A) op(B) + beta C, row-major: oneDNN's sgemm for float (one thread inside a parallel
// region), plain loops for double (the float64 kernels serve gradient checks).
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  blas::sgemm({ta, tb, m, n, k, lda, ldb, ldc}, alpha, a, b, beta, c);
}
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                 const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
      c[i * ldc + j] = alpha * s + (beta == 0 ? 0 : beta * c[i * ldc + j]);
    }
}

// Whether the forward keeps the probabilities for the backward (its second output), by the node's
// attribute `probabilities`: "keep", "recompute", or "auto" (the default): kept when they take at
// most kKeepBytes, where keeping them costs no more memory than the activations around them and
// saves the backward a product and the exponentials; recomputed above, where [.., Sq, Sk] per
// attention node would dominate the training's memory.
constexpr int64_t kKeepBytes = int64_t{64} << 20;

inline bool keep_probabilities(const char* op, const Node& n, const Geometry& g, DType dtype) {
  const std::string mode = n.attr_string("probabilities", "auto");
  if (mode == "keep") return true;
  if (mode == "recompute") return false;
  if (mode != "auto")
    throw InvalidModel(
        fmt::format("{}: attribute probabilities must be \"auto\", \"keep\" or \"recompute\", got \"{}\"", op, mode));
  // 16-bit P is sized as float32, as when these kernels ran on widened operands (the decision, and
  // so the backward's numerics, stays what it was).
  const DType sized = is_16_bit(dtype) ? DType::Float32 : dtype;
  return g.items() * g.sq() * g.sk() * static_cast<int64_t>(dtype_size(sized)) <= kKeepBytes;
}

// Buffers for parallel_chunks over at most n tasks, `per_chunk` elements each, from the calling
// thread's scratch memory: taken once for calls in a loop (scratch is given back only when the
// kernel's call ends).
template <class T>
T* chunk_buffers(int64_t n, int64_t per_chunk) {
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(n, omp_in_parallel() ? 1 : omp_get_max_threads()));
  return static_cast<T*>(scratch_take(static_cast<size_t>(chunks * per_chunk) * sizeof(T)));
}

// Calls f(chunk, begin, end) over [0, n) in at most one chunk per thread, each with its own
// `per_chunk` elements of T from `buffers` (chunk_buffers for at least n tasks).
template <class T, class F>
void parallel_chunks(int64_t n, T* buffers, int64_t per_chunk, F&& f) {
  if (n <= 0) return;
  const int64_t chunks = std::min<int64_t>(n, omp_in_parallel() ? 1 : omp_get_max_threads());
#pragma omp parallel for num_threads(static_cast <int>(chunks)) schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) f(buffers + c * per_chunk, n * c / chunks, n * (c + 1) / chunks);
}

// The same with buffers of its own.
template <class T, class F>
void parallel_chunks(int64_t n, int64_t per_chunk, F&& f) {
  if (n > 0) parallel_chunks<T>(n, chunk_buffers<T>(n, per_chunk), per_chunk, std::forward<F>(f));
}

// A stored element in the kernels' compute type: 16-bit values (mixed precision's bfloat16 or
// float16 operands) widened to float32, which holds each exactly.
inline float load(float v) { return v; }
inline double load(double v) { return v; }
inline float load(BFloat16 v) { return bfloat16_to_float(v); }
inline float load(Half v) { return half_to_float(v); }

// The rows after the product: p holds rows [r0, r0 + rows) of item `item`'s scaled scores, and
// leaves with their probabilities (bias, fill, softmax), as probabilities() below. B, the bias's
// element type, is T or (for 16-bit operands) the bias's own 16-bit or float32 type.
template <class T, class B>
void finish_rows(const Geometry& g, const Attrs& a, const bool* mask, const B* bias, int64_t item, int64_t r0,
                 int64_t rows, T* p) {
  const int64_t sk = g.sk();
  const auto at = [&](const Spread& s) { return s.item[static_cast<size_t>(item)]; };
  const T fill = static_cast<T>(a.fill);
  for (int64_t r = 0; r < rows; ++r) {
    T* row = p + r * sk;
    if (bias) {
      const B* b = bias + at(g.bias()) + (r0 + r) * g.bias().row;
      if (g.bias().col == 1) {
#pragma omp simd
        for (int64_t k = 0; k < sk; ++k) row[k] += load(b[k]);
      } else {
        for (int64_t k = 0; k < sk; ++k) row[k] += load(b[0]);
      }
    }
    if (mask != nullptr) {
      const bool* m = mask + at(g.mask()) + (r0 + r) * g.mask().row;
      const bool where = a.fill_where;
      if (g.mask().col == 1) {
#pragma omp simd
        for (int64_t k = 0; k < sk; ++k) row[k] = m[k] == where ? fill : row[k];
      } else if (m[0] == where) {
        std::fill(row, row + sk, fill);
      }
    }
    if constexpr (std::is_same_v<T, float>) {
      const float max = vmath::max(row, sk);
      const float inv = static_cast<float>(1.0 / vmath::exp_sum(row, sk, max));
#pragma omp simd
      for (int64_t k = 0; k < sk; ++k) row[k] *= inv;
    } else {
      double max = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t k = 0; k < sk; ++k) max = std::max(max, row[k]);
      for (int64_t k = 0; k < sk; ++k) sum += row[k] = std::exp(row[k] - max);
      for (int64_t k = 0; k < sk; ++k) row[k] /= sum;
    }
  }
}

// Rows [r0, r0 + rows) of batch item `item`'s probabilities into p (rows x Sk): the scaled scores
// from one product, the bias added, the fill written where the mask selects, softmax along each row.
// `q_rows` is the item's Q from row r0 ([rows, D]), `kt_item` the item's Kt ([D, Sk]).
template <class T, class B>
void probabilities(const Geometry& g, const Attrs& a, const T* q_rows, const T* kt_item, const bool* mask,
                   const B* bias, int64_t item, int64_t r0, int64_t rows, T* p) {
  const int64_t sk = g.sk(), d = g.d();
  if (d == 0) std::fill(p, p + rows * sk, T(0));
  else gemm(false, false, rows, sk, d, T(a.scale), q_rows, d, kt_item, sk, T(0), p, sk);
  finish_rows(g, a, mask, bias, item, r0, rows, p);
}

// The scores' gradient from rows [r0, r0 + rows) of item `item`'s probabilities p and their
// gradient dp: dp = p (dp - rowsum(p dp)) row by row, 0 where the mask filled (no path to the
// scores there).
template <class T>
void scores_gradient(const Geometry& g, const Attrs& a, const bool* mask, int64_t item, int64_t r0, int64_t rows,
                     const T* p, T* dp) {
  const int64_t sk = g.sk();
  for (int64_t r = 0; r < rows; ++r) {
    const T* pr = p + r * sk;
    T* gr = dp + r * sk;
    double dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t k = 0; k < sk; ++k) dot += static_cast<double>(pr[k]) * static_cast<double>(gr[k]);
    const T delta = static_cast<T>(dot);
#pragma omp simd
    for (int64_t k = 0; k < sk; ++k) gr[k] = pr[k] * (gr[k] - delta);
    if (mask == nullptr) continue;
    const bool* m = mask + g.mask().item[static_cast<size_t>(item)] + (r0 + r) * g.mask().row;
    const int64_t step = g.mask().col;
    for (int64_t k = 0; k < sk; ++k)
      if (m[k * step] == a.fill_where) gr[k] = T(0);
  }
}

// Calls f with the bias's elements: float32 or S (beside 16-bit operands S, mixed precision leaves
// the bias in float32), or a null S pointer without one.
template <class S, class F>
void visit_bias(const Tensor* bias, F&& f) {
  if (bias != nullptr && bias->dtype() == DType::Float32) return f(bias->data<float>());
  f(bias != nullptr ? bias->data<S>() : static_cast<const S*>(nullptr));
}

// Y's shape after checking the operands' dtypes: Q, Kt, V one float dtype, the bias that dtype (or
// float32 beside 16-bit operands, as mixed precision leaves it), the mask bool.
inline Geometry check(const char* op, const InferContext& ctx, size_t mask_input, size_t bias_input) {
  const TensorMeta &q = ctx.input(0), &kt = ctx.input(1), &v = ctx.input(2);
  if (q.dtype != DType::Float32 && q.dtype != DType::Float64 && !is_16_bit(q.dtype))
    throw TypeError(fmt::format("{}: Q must be float32, float64, bfloat16 or float16, got {}{}", op,
                                dtype_name(q.dtype), to_string(q.shape)));
  for (const TensorMeta* t : {&kt, &v})
    if (t->dtype != q.dtype)
      throw TypeError(fmt::format("{}: Kt and V must have Q's dtype {}, got {}{}", op, dtype_name(q.dtype),
                                  dtype_name(t->dtype), to_string(t->shape)));
  const bool has_mask = ctx.has_input(mask_input), has_bias = ctx.has_input(bias_input);
  if (has_mask && ctx.dtype(mask_input) != DType::Bool)
    throw TypeError(fmt::format("{}: the mask must be bool, got {}", op, dtype_name(ctx.dtype(mask_input))));
  if (has_bias && ctx.dtype(bias_input) != q.dtype && !(is_16_bit(q.dtype) && ctx.dtype(bias_input) == DType::Float32))
    throw TypeError(fmt::format("{}: the bias must have Q's dtype {}, got {}", op, dtype_name(q.dtype),
                                dtype_name(ctx.dtype(bias_input))));
  return Geometry(op, q.shape, kt.shape, v.shape, has_mask ? &ctx.shape(mask_input) : nullptr,
                  has_bias ? &ctx.shape(bias_input) : nullptr);
}

}  // namespace kiln::attention

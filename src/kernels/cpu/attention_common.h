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
#include <fmt/ranges.h>
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
// element steps along a row of queries and along the keys (0 where it repeats). For Q, Kt, V, Y and
// their gradients, `row` and `col` are the steps along the matrix's rows and columns in the tensor
// the node reads or writes: one of them is 1 (ld and trans below).
struct Spread {
  std::vector<int64_t> item;
  int64_t row = 0, col = 0;
  bool present = false;
  // The matrix as a BLAS operand: stored row-major with leading dimension ld(), or (trans()) its
  // transpose stored so (Kt read from K's own layout).
  int64_t ld() const { return col == 1 ? row : col; }
  bool trans() const { return col != 1; }
};

// An operand as the node holds it: Transpose(stored, perm) (perm empty: the stored tensor itself),
// the attributes perm_q, perm_kt, perm_v and perm_y (attention_fusion.cpp folds exporters'
// head-splitting Transposes into them). `logical` is the operand's shape, `steps` each of its axes'
// element step in the stored tensor.
struct Layout {
  Shape logical;
  Strides steps;
};

// The node's permutation `name` for an operand stored with rank `rank`; empty when absent or the
// identity. Throws InvalidModel when it is not a permutation of [0, rank).
inline std::vector<int64_t> perm_of(const char* op, const Node& n, const char* name, size_t rank) {
  if (!n.has_attr(name)) return {};
  std::vector<int64_t> p = n.attrs.at(name).ints;
  std::vector<bool> seen(rank, false);
  bool identity = p.size() == rank;
  for (size_t i = 0; i < p.size() && identity; ++i) identity = p[i] == static_cast<int64_t>(i);
  for (const int64_t a : p) {
    if (p.size() != rank || a < 0 || a >= static_cast<int64_t>(rank) || seen[static_cast<size_t>(a)])
      throw InvalidModel(
          fmt::format("{} node '{}': attribute {} must be a permutation of the {} axes of its operand, got [{}]", op,
                      n.name, name, rank, fmt::join(p, ", ")));
    seen[static_cast<size_t>(a)] = true;
  }
  return identity ? std::vector<int64_t>{} : p;
}

// The layout of Transpose(stored, perm): logical[i] = stored[perm[i]], stepping as stored's axis perm[i].
inline Layout read_as(const Shape& stored, const std::vector<int64_t>& perm) {
  const Strides own = contiguous_strides(stored);
  if (perm.empty()) return {stored, own};
  Layout l;
  for (const int64_t a : perm) {
    l.logical.push_back(stored[static_cast<size_t>(a)]);
    l.steps.push_back(own[static_cast<size_t>(a)]);
  }
  return l;
}

// The tensor the node stores for a logical result under `perm` (its Transpose by perm):
// stored[perm[i]] = logical[i].
inline Shape stored_shape(const Shape& logical, const std::vector<int64_t>& perm) {
  if (perm.empty()) return logical;
  Shape s(logical.size());
  for (size_t i = 0; i < perm.size(); ++i) s[static_cast<size_t>(perm[i])] = logical[i];
  return s;
}

// The layout of a result written as stored_shape(logical, perm).
inline Layout written_as(const Shape& logical, const std::vector<int64_t>& perm) {
  Layout l = read_as(stored_shape(logical, perm), {});
  if (perm.empty()) return l;
  Strides steps(logical.size());
  for (size_t i = 0; i < perm.size(); ++i) steps[i] = l.steps[static_cast<size_t>(perm[i])];
  return {logical, steps};
}

// The shapes of one Attention node: the broadcast batch, the matrix sizes, and where each operand's
// matrix of every batch item starts.
class Geometry {
 public:
  Geometry() = default;
  // `q`, `kt`, `v`: the operands' layouts; `mask`, `bias`: null when absent; Y's layout from the
  // node's perm_y. Throws ShapeError, or InvalidModel for a bad perm_y or a layout whose matrices
  // have no unit step.
  Geometry(const char* op, const Node& node, const Layout& q, const Layout& kt, const Layout& v, const Shape* mask,
           const Shape* bias) {
    const auto describe = [&] {
      return fmt::format("Q{} Kt{} V{}{}{}", to_string(q.logical), to_string(kt.logical), to_string(v.logical),
                         mask ? " mask" + to_string(*mask) : "", bias ? " bias" + to_string(*bias) : "");
    };
    if (q.logical.size() < 2 || kt.logical.size() < 2 || v.logical.size() < 2)
      throw ShapeError(fmt::format("{}: Q, Kt and V must have rank >= 2, got {}", op, describe()));
    sq_ = q.logical[q.logical.size() - 2];
    d_ = q.logical.back();
    sk_ = kt.logical.back();
    dv_ = v.logical.back();
    if (kt.logical[kt.logical.size() - 2] != d_ || v.logical[v.logical.size() - 2] != sk_)
      throw ShapeError(
          fmt::format("{}: Q [.., Sq, D], Kt [.., D, Sk] and V [.., Sk, Dv] do not agree: {}", op, describe()));
    const auto lead = [](const Shape& s, size_t keep) { return Shape(s.begin(), s.end() - static_cast<long>(keep)); };
    try {
      batch_ = broadcast_shapes(broadcast_shapes(lead(q.logical, 2), lead(kt.logical, 2)), lead(v.logical, 2));
      for (const Shape* s : {mask, bias})
        if (s) batch_ = broadcast_shapes(batch_, lead(padded(*s), 2));
    } catch (const ShapeError&) {
      throw ShapeError(fmt::format("{}: the batch dims do not broadcast: {}", op, describe()));
    }
    perm_y_ = perm_of(op, node, "perm_y", batch_.size() + 2);
    items_ = numel(batch_);
    views_ = q.steps != contiguous_strides(q.logical) || kt.steps != contiguous_strides(kt.logical) ||
             v.steps != contiguous_strides(v.logical) || !perm_y_.empty();
    q_ = operand(op, node, "Q", q, false);
    kt_ = operand(op, node, "Kt", kt, true);
    v_ = operand(op, node, "V", v, false);
    y_ = operand(op, node, "Y", written_as(with_batch({sq_, dv_}), perm_y_), false);
    for (auto [s, out] : {std::pair{mask, &mask_}, std::pair{bias, &bias_}}) {
      if (!s) continue;
      const Shape p = padded(*s);
      const int64_t rows = p[p.size() - 2], cols = p.back();
      if ((rows != 1 && rows != sq_) || (cols != 1 && cols != sk_))
        throw ShapeError(fmt::format("{}: the mask and the bias must broadcast to the scores [.., {}, {}]: {}", op, sq_,
                                     sk_, describe()));
      *out = spread(p, contiguous_strides(p));
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
  const Spread& y() const { return y_; }
  const Spread& mask() const { return mask_; }
  const Spread& bias() const { return bias_; }
  // Whether any of Q, Kt, V and Y is a view (a perm attribute) rather than its items' plain
  // matrices one after another.
  bool views() const { return views_; }
  const std::vector<int64_t>& perm_y() const { return perm_y_; }
  Shape with_batch(std::initializer_list<int64_t> tail) const {
    Shape s = batch_;
    s.insert(s.end(), tail);
    return s;
  }
  // A full-batch result [batch.., rows, cols] written under `perm` (AttentionGrad's dQ, dKt, dV in
  // their operands' layouts): its stored shape, and its Spread.
  Shape stored(std::initializer_list<int64_t> tail, const std::vector<int64_t>& perm) const {
    return stored_shape(with_batch(tail), perm);
  }
  Spread written(const char* op, const Node& node, const char* what, std::initializer_list<int64_t> tail,
                 const std::vector<int64_t>& perm) const {
    return operand(op, node, what, written_as(with_batch(tail), perm), true);
  }
  // An operand's perm for its full-batch gradient: the batch dims it broadcast over lead, in order.
  std::vector<int64_t> full_batch(std::vector<int64_t> perm) const {
    if (perm.empty() || perm.size() >= batch_.size() + 2) return perm;
    const auto extra = static_cast<int64_t>(batch_.size() + 2 - perm.size());
    for (int64_t& a : perm) a += extra;
    for (int64_t a = extra; a-- > 0;) perm.insert(perm.begin(), a);
    return perm;
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
  // Offsets of each batch item's matrix in an operand of logical shape `s` (rank >= 2) whose axes
  // step by `steps`.
  Spread spread(const Shape& s, const Strides& steps) const {
    Spread r;
    r.item.resize(static_cast<size_t>(items_));
    const size_t rank = batch_.size(), lead = rank - (s.size() - 2);
    std::vector<int64_t> idx(rank, 0);
    for (int64_t i = 0; i < items_; ++i) {
      int64_t off = 0;
      for (size_t d = lead; d < rank; ++d)
        if (s[d - lead] != 1) off += idx[d] * steps[d - lead];
      r.item[static_cast<size_t>(i)] = off;
      for (size_t d = rank; d-- > 0;) {
        if (++idx[d] < batch_[d]) break;
        idx[d] = 0;
      }
    }
    return r;
  }
  // An operand's Spread with its matrix's steps: columns at unit step, or (`may_transpose`, Kt) rows
  // at unit step. A step along an axis of extent 1 is free, and is made what BLAS expects.
  Spread operand(const char* op, const Node& node, const char* what, const Layout& l, bool may_transpose) const {
    Spread r = spread(l.logical, l.steps);
    const size_t n = l.logical.size();
    const int64_t rows = l.logical[n - 2], cols = l.logical[n - 1];
    r.row = l.steps[n - 2];
    r.col = l.steps[n - 1];
    if (cols <= 1) r.col = 1;
    if (r.col != 1 && rows <= 1) r.row = 1;
    if (r.col == 1 && rows <= 1) r.row = std::max<int64_t>(1, cols);
    if (r.col != 1 && (!may_transpose || r.row != 1))
      throw InvalidModel(
          fmt::format("{} node '{}': {}'s layout (its perm attribute) leaves neither its rows nor its "
                      "columns contiguous{}",
                      op, node.name, what, may_transpose ? "" : " (its columns must be)"));
    r.present = true;
    return r;
  }

  Shape batch_;
  std::vector<int64_t> perm_y_;
  int64_t items_ = 0, sq_ = 0, sk_ = 0, d_ = 0, dv_ = 0;
  bool views_ = false;
  Spread q_, kt_, v_, y_, mask_, bias_;
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

// `rows` rows of `cols` 16-bit values, `ld` apart, widened into dst (rows x cols, packed); and
// back, rounded, from packed float32 rows into rows `ld` apart.
template <class S>
void widen_rows(const S* src, int64_t ld, float* dst, int64_t rows, int64_t cols) {
  if (ld == cols) return widen_values(src, dst, rows * cols);
  for (int64_t r = 0; r < rows; ++r) widen_values(src + r * ld, dst + r * cols, cols);
}
template <class S>
void narrow_rows(const float* src, S* dst, int64_t ld, int64_t rows, int64_t cols) {
  if (ld == cols) return narrow_values(src, dst, rows * cols);
  for (int64_t r = 0; r < rows; ++r) narrow_values(src + r * cols, dst + r * ld, cols);
}

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
// `q_rows` is the item's Q from row r0 ([rows, D], rows ldq apart), `kt_item` the item's Kt ([D,
// Sk] with leading dimension ldkt, or its K [Sk, D] when kt_trans).
template <class T, class B>
void probabilities(const Geometry& g, const Attrs& a, const T* q_rows, int64_t ldq, const T* kt_item, int64_t ldkt,
                   bool kt_trans, const bool* mask, const B* bias, int64_t item, int64_t r0, int64_t rows, T* p) {
  const int64_t sk = g.sk(), d = g.d();
  if (d == 0) std::fill(p, p + rows * sk, T(0));
  else gemm(false, kt_trans, rows, sk, d, T(a.scale), q_rows, ldq, kt_item, ldkt, T(0), p, sk);
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
  const Node& n = ctx.node;
  const auto layout = [&](const TensorMeta& t, const char* perm) {
    return read_as(t.shape, perm_of(op, n, perm, t.shape.size()));
  };
  const Layout lq = layout(q, "perm_q"), lkt = layout(kt, "perm_kt"), lv = layout(v, "perm_v");
  return Geometry(op, n, lq, lkt, lv, has_mask ? &ctx.shape(mask_input) : nullptr,
                  has_bias ? &ctx.shape(bias_input) : nullptr);
}

}  // namespace kiln::attention

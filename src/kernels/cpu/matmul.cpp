// MatMul (numpy semantics: broadcast batch dims, 1-D operands promoted and their dim dropped) and
// Gemm (Y = alpha * A' B' + beta * C, C broadcast to [M, N]). float32 runs on oneDNN's matmul
// primitive, built once per planned shape, and so does bfloat16 where the CPU has bfloat16
// instructions (low_precision.h; float32 accumulation); float64 on OpenBLAS dgemm; integer MatMul
// on loops.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/parallel.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/low_precision.h"
#include "kernels/cpu/matmul_common.h"
#include "kiln/kernel.h"

namespace kiln {

namespace {
std::string describe_meta(const TensorMeta& m) { return fmt::format("{}{}", dtype_name(m.dtype), to_string(m.shape)); }
}  // namespace

MatMulShape matmul_shape(const TensorMeta& a, const TensorMeta& b, const char* op) {
  if (a.shape.empty() || b.shape.empty())
    throw ShapeError(fmt::format("{}: cannot multiply {} by {} (operands must have rank >= 1)", op, describe_meta(a),
                                 describe_meta(b)));
  Shape as = a.shape, bs = b.shape;
  const bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  if (a_vec) as.insert(as.begin(), 1);
  if (b_vec) bs.push_back(1);
  MatMulShape r;
  r.m = as[as.size() - 2];
  r.k = as.back();
  r.n = bs.back();
  if (bs[bs.size() - 2] != r.k)
    throw ShapeError(fmt::format("{}: cannot multiply {} by {} (inner dims {} vs {})", op, describe_meta(a),
                                 describe_meta(b), r.k, bs[bs.size() - 2]));
  r.a_batch.assign(as.begin(), as.end() - 2);
  r.b_batch.assign(bs.begin(), bs.end() - 2);
  try {
    r.batch = broadcast_shapes(r.a_batch, r.b_batch);
  } catch (const ShapeError&) {
    throw ShapeError(fmt::format("{}: cannot multiply {} by {} (batch dims {} and {} do not broadcast)", op,
                                 describe_meta(a), describe_meta(b), to_string(r.a_batch), to_string(r.b_batch)));
  }
  r.a_batch.insert(r.a_batch.begin(), r.batch.size() - r.a_batch.size(), 1);
  r.b_batch.insert(r.b_batch.begin(), r.batch.size() - r.b_batch.size(), 1);
  r.out = r.batch;
  if (!a_vec) r.out.push_back(r.m);
  if (!b_vec) r.out.push_back(r.n);
  return r;
}

std::vector<std::pair<int64_t, int64_t>> batch_pairs(const MatMulShape& s) {
  const size_t r = s.batch.size();
  const Strides as = contiguous_strides(s.a_batch), bs = contiguous_strides(s.b_batch);
  std::vector<std::pair<int64_t, int64_t>> pairs(static_cast<size_t>(numel(s.batch)));
  std::vector<int64_t> idx(r, 0);
  for (auto& p : pairs) {
    for (size_t d = 0; d < r; ++d) {
      if (s.a_batch[d] != 1) p.first += idx[d] * as[d];
      if (s.b_batch[d] != 1) p.second += idx[d] * bs[d];
    }
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < s.batch[d]) break;
      idx[d] = 0;
    }
  }
  return pairs;
}

namespace {

using dnnl_util::plain_desc;
using dnnl_util::strided_desc;

void check_same_dtype(const char* op, const char* what, const TensorMeta& a, const TensorMeta& b) {
  if (a.dtype != b.dtype)
    throw TypeError(
        fmt::format("{}: {} must have the dtype of A, but A is {} and it is {}", op, what, a.describe(), b.describe()));
}

// ---------------------------------------------------------------------------------------------
// MatMul

// MatMul, and ai.kiln.FusedMatMul: a MatMul whose operands are read with their last two axes
// swapped when transA / transB is set (the gradient of a MatMul needs A^T and B^T; reading them
// in place saves a Transpose's copy of each).
class MatMulBase : public Kernel {
 public:
  // Only FusedMatMul has the flags: ONNX's MatMul has no attributes, and a stray one is ignored.
  explicit MatMulBase(const Node& node)
      : Kernel(node),
        trans_a_(fused(node) && node.attr_int("transA", 0) != 0),
        trans_b_(fused(node) && node.attr_int("transB", 0) != 0),
        float_out_(fused(node) && node.has_attr("out_dtype")) {
    if (float_out_ && node.attr_int("out_dtype") != dtype_to_onnx(DType::Float32))
      throw InvalidModel(fmt::format("FusedMatMul: out_dtype {} is not float32 ({}), the one output type it takes",
                                     node.attr_int("out_dtype"), dtype_to_onnx(DType::Float32)));
  }
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    const TensorMeta& a = ctx.input(0);
    const TensorMeta& b = ctx.input(1);
    check_same_dtype(node_.op_type.c_str(), "B", a, b);
    if (float_out_ && !(a.dtype == DType::BFloat16 || a.dtype == DType::Float16 || a.dtype == DType::Float32))
      throw TypeError(fmt::format("FusedMatMul: out_dtype float32 takes bfloat16, float16 or float32 operands, got {}",
                                  a.describe()));
    return {TensorMeta{float_out_ ? DType::Float32 : a.dtype, shape_of(a, b).out, a.dynamic || b.dynamic, Tensor()}};
  }

 protected:
  static bool fused(const Node& node) { return node.domain == kKilnDomain; }
  // The product's shape, from the operands as stored.
  MatMulShape shape_of(const TensorMeta& a, const TensorMeta& b) const {
    return matmul_shape(operand(a, trans_a_, "A"), operand(b, trans_b_, "B"));
  }
  MatMulShape shape_of(const Shape& a, const Shape& b) const {
    return shape_of(TensorMeta{DType::Float32, a, false, Tensor()}, TensorMeta{DType::Float32, b, false, Tensor()});
  }
  // The product as one row-major GEMM, when it is one: A's batch folded into M (B shared, A read
  // as it is stored) or a single pair of matrices. Batches of pairs have none.
  std::optional<blas::GemmShape> single_product(const MatMulShape& s) const {
    const int64_t lda = trans_a_ ? s.m : s.k, ldb = trans_b_ ? s.k : s.n;
    if (s.b_single() && !trans_a_)
      return blas::GemmShape{false, trans_b_, numel(s.a_batch) * s.m, s.n, s.k, lda, ldb, s.n};
    if (numel(s.batch) == 1) return blas::GemmShape{trans_a_, trans_b_, s.m, s.n, s.k, lda, ldb, s.n};
    return std::nullopt;
  }
  // An operand as the product sees it: its last two axes swapped when `trans`.
  TensorMeta operand(const TensorMeta& m, bool trans, const char* name) const {
    if (!trans) return m;
    if (m.shape.size() < 2)
      throw ShapeError(
          fmt::format("{}: trans{} needs {} of rank >= 2, got {}", node_.op_type, name, name, m.describe()));
    TensorMeta t = m;
    std::swap(t.shape[t.shape.size() - 1], t.shape[t.shape.size() - 2]);
    return t;
  }

  bool trans_a_, trans_b_;
  bool float_out_;  // FusedMatMul's out_dtype: 16-bit operands, the float32 result written as it is
};

// A batch of rows x cols matrices; `trans`: stored as cols x rows (read through swapped strides).
dnnl::memory::desc matrix_desc(const Shape& batch, int64_t rows, int64_t cols, bool trans, dnnl::memory::data_type dt) {
  Shape stored = batch;
  stored.push_back(trans ? cols : rows);
  stored.push_back(trans ? rows : cols);
  if (!trans) return plain_desc(stored, dt);
  Strides strides = contiguous_strides(stored);
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  std::swap(stored[stored.size() - 1], stored[stored.size() - 2]);
  return strided_desc(stored, strides, dt);
}

using dnnl_dt = dnnl::memory::data_type;

// float32 (or native bfloat16) on oneDNN. With a shared B, A's batch folds into M (one large GEMM,
// the Linear-layer case); otherwise oneDNN's batched matmul broadcasts the batch dims itself.
class MatMulDnnl final : public MatMulBase {
 public:
  MatMulDnnl(const Node& node, dnnl_dt dt) : MatMulBase(node), dt_(dt) {}
  void prepare(const InferContext& ctx, const std::vector<TensorMeta>&) override { build(ctx.shape(0), ctx.shape(1)); }
  void compute(ComputeContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.shape() != a_shape_ || b.shape() != b_shape_ || !built_) build(a.shape(), b.shape());
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    if (s_.k == 0) {
      std::memset(y.raw_data(), 0, y.nbytes());
      return;
    }
    if (blas_) return blas::sgemm(*blas_, 1.f, a.data<float>(), b.data<float>(), 0.f, y.data<float>());
    dnnl_util::execute(prim_,
                       {{DNNL_ARG_SRC, dnnl_util::memory_of(src_, a)},
                        {DNNL_ARG_WEIGHTS, dnnl_util::memory_of(wei_, b)},
                        {DNNL_ARG_DST, dnnl_util::memory_of(dst_, y)}},
                       "matmul");
  }

 private:
  void build(const Shape& a, const Shape& b) {
    a_shape_ = a;
    b_shape_ = b;
    s_ = shape_of(a, b);
    built_ = true;
    blas_.reset();
    if (numel(s_.out) == 0 || s_.k == 0) return;  // nothing for oneDNN to do
    // One float32 product on OpenBLAS where it is faster (blas.h); batches of products stay on
    // oneDNN's batched matmul.
    if (dt_ == dnnl_dt::f32 && !float_out_ && blas::openblas_sgemm()) {
      blas_ = single_product(s_);
      if (blas_) return;
    }
    if (s_.b_single() && !trans_a_) {
      const int64_t rows = numel(s_.a_batch) * s_.m;
      src_ = plain_desc({rows, s_.k}, dt_);
      wei_ = matrix_desc({}, s_.k, s_.n, trans_b_, dt_);
      dst_ = plain_desc({rows, s_.n}, dst_dt());
    } else {
      if (s_.batch.size() + 2 > DNNL_MAX_NDIMS)
        throw Unsupported(fmt::format("{}: {} batch dims exceed oneDNN's limit of {} dims", node_.op_type,
                                      s_.batch.size(), DNNL_MAX_NDIMS));
      src_ = matrix_desc(s_.a_batch, s_.m, s_.k, trans_a_, dt_);
      wei_ = matrix_desc(s_.b_batch, s_.k, s_.n, trans_b_, dt_);
      dst_ = matrix_desc(s_.batch, s_.m, s_.n, false, dst_dt());
    }
    const char* type = dt_ == dnnl_dt::bf16 ? "bfloat16" : "float";
    const std::string what =
        fmt::format("build a {} for {}{} x {}{}", node_.op_type, type, to_string(a), type, to_string(b));
    prim_ = dnnl_util::checked(what, [&] {
      return dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_, wei_, dst_), dnnl_util::engine()));
    });
  }

  dnnl_dt dst_dt() const { return float_out_ ? dnnl_dt::f32 : dt_; }

  dnnl_dt dt_;
  Shape a_shape_, b_shape_;
  MatMulShape s_;
  bool built_ = false;
  std::optional<blas::GemmShape> blas_;  // the product, when OpenBLAS runs it
  dnnl::memory::desc src_, wei_, dst_;
  dnnl::matmul prim_;
};

class MatMulF64 final : public MatMulBase {
 public:
  using MatMulBase::MatMulBase;
  void compute(ComputeContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    Tensor& y = ctx.output(0);
    const MatMulShape s = shape_of(TensorMeta::of(a), TensorMeta::of(b));
    if (y.numel() == 0) return;
    if (s.k == 0) {
      std::memset(y.raw_data(), 0, y.nbytes());
      return;
    }
    const double* pa = a.data<double>();
    const double* pb = b.data<double>();
    double* py = y.data<double>();
    if (const std::optional<blas::GemmShape> one = single_product(s)) return blas::dgemm(*one, 1.0, pa, pb, 0.0, py);
    const int64_t lda = trans_a_ ? s.m : s.k, ldb = trans_b_ ? s.k : s.n;
    const auto pairs = batch_pairs(s);
    for (size_t i = 0; i < pairs.size(); ++i)
      blas::dgemm({trans_a_, trans_b_, s.m, s.n, s.k, lda, ldb, s.n}, 1.0, pa + pairs[i].first * s.m * s.k,
                  pb + pairs[i].second * s.k * s.n, 0.0, py + int64_t(i) * s.m * s.n);
  }
};

// Integer MatMul: exact, wrapping like ONNX Runtime's; row by row across threads.
template <class T>
class MatMulInt final : public MatMulBase {
 public:
  using MatMulBase::MatMulBase;
  void compute(ComputeContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    Tensor& y = ctx.output(0);
    const MatMulShape s = matmul_shape(TensorMeta::of(a), TensorMeta::of(b));
    const auto pairs = batch_pairs(s);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* py = y.data<T>();
    const int64_t m = s.m, k = s.k, n = s.n;
    parallel_for(int64_t(pairs.size()) * m, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, k * n)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t row = begin; row < end; ++row) {
                     const auto [ai, bi] = pairs[size_t(row / m)];
                     const T* ar = pa + ai * m * k + (row % m) * k;
                     const T* bm = pb + bi * k * n;
                     T* yr = py + row * n;
                     std::fill(yr, yr + n, T(0));
                     for (int64_t p = 0; p < k; ++p) {
                       const T av = ar[p];
                       for (int64_t j = 0; j < n; ++j) yr[j] = T(yr[j] + av * bm[p * n + j]);
                     }
                   }
                 });
  }
};

template <class K>
std::unique_ptr<Kernel> make(const Node& n) {
  return std::make_unique<K>(n);
}

std::unique_ptr<Kernel> make_f32(const Node& n) { return std::make_unique<MatMulDnnl>(n, dnnl_dt::f32); }
std::unique_ptr<Kernel> make_bf16(const Node& n) { return std::make_unique<MatMulDnnl>(n, dnnl_dt::bf16); }

const KernelRegistrar matmul_f32({"", "MatMul", 1, kMaxOpset, {DType::Float32}}, make_f32);
const KernelRegistrar matmul_f64({"", "MatMul", 1, kMaxOpset, {DType::Float64}}, make<MatMulF64>);
const KernelRegistrar matmul_bf16({"", "MatMul", 1, kMaxOpset, {DType::BFloat16}}, bf16_kernels(make_bf16, make_f32));
const KernelRegistrar matmul_f16({"", "MatMul", 1, kMaxOpset, {DType::Float16}}, via_float32(make_f32));
const KernelRegistrar matmul_i32({"", "MatMul", 9, kMaxOpset, {DType::Int32}}, make<MatMulInt<int32_t>>);
const KernelRegistrar matmul_i64({"", "MatMul", 9, kMaxOpset, {DType::Int64}}, make<MatMulInt<int64_t>>);
const KernelRegistrar matmul_u32({"", "MatMul", 9, kMaxOpset, {DType::Uint32}}, make<MatMulInt<uint32_t>>);
const KernelRegistrar matmul_u64({"", "MatMul", 9, kMaxOpset, {DType::Uint64}}, make<MatMulInt<uint64_t>>);

// ---------------------------------------------------------------------------------------------
// Gemm

struct GemmShape {
  int64_t m = 0, k = 0, n = 0;
  bool trans_a = false, trans_b = false;
  bool has_c = false;
  Shape c;  // C's shape when present
};

GemmShape gemm_shape(const Node& node, const InferContext& ctx) {
  const TensorMeta& a = ctx.input(0);
  const TensorMeta& b = ctx.input(1);
  check_same_dtype("Gemm", "B", a, b);
  GemmShape g;
  g.trans_a = node.attr_int("transA", 0) != 0;
  g.trans_b = node.attr_int("transB", 0) != 0;
  if (a.shape.size() != 2 || b.shape.size() != 2)
    throw ShapeError(fmt::format("Gemm: A {} and B {} must both be 2-D", a.describe(), b.describe()));
  g.m = g.trans_a ? a.shape[1] : a.shape[0];
  g.k = g.trans_a ? a.shape[0] : a.shape[1];
  const int64_t kb = g.trans_b ? b.shape[1] : b.shape[0];
  g.n = g.trans_b ? b.shape[0] : b.shape[1];
  if (g.k != kb)
    throw ShapeError(
        fmt::format("Gemm: cannot multiply A {} (transA={}: {}x{}) by B {} (transB={}: {}x{}) (inner dims "
                    "{} vs {})",
                    a.describe(), int(g.trans_a), g.m, g.k, b.describe(), int(g.trans_b), kb, g.n, g.k, kb));
  if (ctx.has_input(2)) {
    const TensorMeta& c = ctx.input(2);
    check_same_dtype("Gemm", "C", a, c);
    const Shape mn{g.m, g.n};
    bool ok = c.shape.size() <= 2;
    if (ok) {
      try {
        ok = broadcast_shapes(c.shape, mn) == mn;
      } catch (const ShapeError&) {
        ok = false;
      }
    }
    if (!ok)
      throw ShapeError(
          fmt::format("Gemm: C {} does not broadcast to the output [M, N] = {}", c.describe(), to_string(mn)));
    g.has_c = true;
    g.c = c.shape;
  } else if (ctx.opset < 11) {
    throw InvalidModel(fmt::format("Gemm: input C is required before opset 11 (this model is opset {})", ctx.opset));
  }
  return g;
}

// Writes C broadcast to [M, N] into y (row-major).
template <class T>
void broadcast_c(const GemmShape& g, const T* c, T* y) {
  const int64_t cm = g.c.size() == 2 ? g.c[0] : 1;
  const int64_t cn = g.c.empty() ? 1 : g.c.back();
  for (int64_t i = 0; i < g.m; ++i) {
    const T* row = c + (cm == 1 ? 0 : i) * cn;
    T* out = y + i * g.n;
    if (cn == 1) std::fill(out, out + g.n, row[0]);
    else std::copy(row, row + g.n, out);
  }
}

class GemmBase : public Kernel {
 public:
  using Kernel::Kernel;
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    g_ = gemm_shape(node_, ctx);
    const bool dyn = ctx.input(0).dynamic || ctx.input(1).dynamic;
    return {TensorMeta{ctx.dtype(0), {g_.m, g_.n}, dyn, Tensor()}};
  }

 protected:
  float alpha() const { return node_.attr_float("alpha", 1.f); }
  float beta() const { return node_.attr_float("beta", 1.f); }
  bool uses_c() const { return g_.has_c && beta() != 0.f; }
  // The product as BLAS takes it (row-major, operands as stored).
  blas::GemmShape blas_shape() const {
    return {g_.trans_a, g_.trans_b, g_.m, g_.n, g_.k, g_.trans_a ? g_.m : g_.k, g_.trans_b ? g_.k : g_.n, g_.n};
  }
  GemmShape g_;
};

// float32 (or native bfloat16) on oneDNN: transposes are strides, alpha an output scale, beta*C a
// sum post-op over the output, which is first filled with C broadcast.
class GemmDnnl final : public GemmBase {
 public:
  GemmDnnl(const Node& node, dnnl_dt dt) : GemmBase(node), dt_(dt) {}
  void prepare(const InferContext& ctx, const std::vector<TensorMeta>&) override { build(); }
  void compute(ComputeContext& ctx) override {
    Tensor& y = ctx.output(0);
    if (!built_ || y.shape() != Shape{g_.m, g_.n}) build();
    if (y.numel() == 0) return;
    if (dt_ == dnnl_dt::bf16) {
      if (uses_c()) broadcast_c(g_, ctx.input(2).data<BFloat16>(), y.data<BFloat16>());
      if (g_.k == 0) {  // alpha * (empty product) = 0
        BFloat16* py = y.data<BFloat16>();
        for (int64_t i = 0; i < y.numel(); ++i)
          py[i] = float_to_bfloat16(uses_c() ? beta() * bfloat16_to_float(py[i]) : 0.f);
        return;
      }
    } else {
      float* py = y.data<float>();
      if (uses_c()) broadcast_c(g_, ctx.input(2).data<float>(), py);
      if (g_.k == 0) {  // alpha * (empty product) = 0
        for (int64_t i = 0; i < y.numel(); ++i) py[i] = uses_c() ? beta() * py[i] : 0.f;
        return;
      }
      if (blas::openblas_sgemm())
        return blas::sgemm(blas_shape(), alpha(), ctx.input(0).data<float>(), ctx.input(1).data<float>(),
                           uses_c() ? beta() : 0.f, py);
    }
    dnnl_util::execute(prim_,
                       {{DNNL_ARG_SRC, dnnl_util::memory_of(a_, ctx.input(0))},
                        {DNNL_ARG_WEIGHTS, dnnl_util::memory_of(b_, ctx.input(1))},
                        {DNNL_ARG_DST, dnnl_util::memory_of(y_, y)}},
                       "gemm");
  }

 private:
  void build() {
    built_ = true;
    if (g_.m == 0 || g_.n == 0 || g_.k == 0) return;
    if (dt_ == dnnl_dt::f32 && blas::openblas_sgemm()) return;  // compute runs it on OpenBLAS
    a_ = strided_desc({g_.m, g_.k}, g_.trans_a ? Strides{1, g_.m} : Strides{g_.k, 1}, dt_);
    b_ = strided_desc({g_.k, g_.n}, g_.trans_b ? Strides{1, g_.k} : Strides{g_.n, 1}, dt_);
    y_ = plain_desc({g_.m, g_.n}, dt_);
    dnnl::primitive_attr attr;
    if (alpha() != 1.f) attr.set_output_scales(0, {alpha()});
    if (uses_c()) {
      dnnl::post_ops ops;
      ops.append_sum(beta());
      attr.set_post_ops(ops);
    }
    prim_ = dnnl_util::checked(fmt::format("build a gemm for [{}, {}] x [{}, {}]", g_.m, g_.k, g_.k, g_.n), [&] {
      return dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_, b_, y_), attr, dnnl_util::engine()));
    });
  }

  dnnl_dt dt_;
  bool built_ = false;
  dnnl::memory::desc a_, b_, y_;
  dnnl::matmul prim_;
};

class GemmF64 final : public GemmBase {
 public:
  using GemmBase::GemmBase;
  void compute(ComputeContext& ctx) override {
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return;
    double* py = y.data<double>();
    const double b = uses_c() ? beta() : 0.0;
    if (uses_c()) broadcast_c(g_, ctx.input(2).data<double>(), py);
    if (g_.k == 0) {
      for (int64_t i = 0; i < y.numel(); ++i) py[i] = uses_c() ? b * py[i] : 0.0;
      return;
    }
    blas::dgemm(blas_shape(), double(alpha()), ctx.input(0).data<double>(), ctx.input(1).data<double>(), b, py);
  }
};

std::unique_ptr<Kernel> make_gemm_f32(const Node& n) { return std::make_unique<GemmDnnl>(n, dnnl_dt::f32); }
std::unique_ptr<Kernel> make_gemm_bf16(const Node& n) { return std::make_unique<GemmDnnl>(n, dnnl_dt::bf16); }

const KernelRegistrar gemm_f32({"", "Gemm", 7, kMaxOpset, {DType::Float32}}, make_gemm_f32);
const KernelRegistrar gemm_f64({"", "Gemm", 7, kMaxOpset, {DType::Float64}}, make<GemmF64>);
const KernelRegistrar gemm_bf16({"", "Gemm", 7, kMaxOpset, {DType::BFloat16}},
                                bf16_kernels(make_gemm_bf16, make_gemm_f32));
const KernelRegistrar gemm_f16({"", "Gemm", 7, kMaxOpset, {DType::Float16}}, via_float32(make_gemm_f32));

}  // namespace

std::unique_ptr<Kernel> make_float_matmul(const Node& node, DType dtype) {
  if (dtype == DType::Float64) return std::make_unique<MatMulF64>(node);
  if (dtype == DType::BFloat16) return std::make_unique<MatMulDnnl>(node, dnnl_dt::bf16);
  return std::make_unique<MatMulDnnl>(node, dnnl_dt::f32);
}

}  // namespace kiln

// MatMul and Gemm against a double-precision reference on random inputs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;

Node node_of(const std::string& op, size_t inputs, std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.name = "mm";
  n.op_type = op;
  for (size_t i = 0; i < inputs; ++i) n.inputs.push_back(fmt::format("x{}", i));
  n.outputs = {"y"};
  n.attrs = std::move(attrs);
  return n;
}

template <class T>
Tensor random_tensor(const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Tensor t = Tensor::empty(dtype_of<T>, shape);
  T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(dist(gen));
  return t;
}

// Reference MatMul in double with numpy semantics, written independently of the kernel: operands
// promoted to rank >= 2, batch dims broadcast by explicit index arithmetic.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, Shape& out_shape) {
  Shape as = a.shape(), bs = b.shape();
  const bool av = as.size() == 1, bv = bs.size() == 1;
  if (av) as.insert(as.begin(), 1);
  if (bv) bs.push_back(1);
  const size_t r = std::max(as.size(), bs.size());
  as.insert(as.begin(), r - as.size(), 1);
  bs.insert(bs.begin(), r - bs.size(), 1);
  const int64_t m = as[r - 2], k = as[r - 1], n = bs[r - 1];
  Shape batch(r - 2);
  for (size_t d = 0; d + 2 < r; ++d) batch[d] = std::max(as[d], bs[d]);
  out_shape = batch;
  if (!av) out_shape.push_back(m);
  if (!bv) out_shape.push_back(n);
  const int64_t nb = numel(batch);
  std::vector<double> out(size_t(nb * m * n), 0.0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t rem = bi, ao = 0, bo = 0, astr = 1, bstr = 1;
    for (size_t d = r - 2; d-- > 0;) {
      const int64_t i = rem % batch[d];
      rem /= batch[d];
      ao += (as[d] == 1 ? 0 : i) * astr;
      bo += (bs[d] == 1 ? 0 : i) * bstr;
      astr *= as[d];
      bstr *= bs[d];
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += a.item_as_double((ao * m + i) * k + p) * b.item_as_double((bo * k + p) * n + j);
        out[size_t((bi * m + i) * n + j)] = s;
      }
  }
  return out;
}

// max |y - ref| <= tol * max(1, max |ref|)
void expect_close(const Tensor& y, const std::vector<double>& ref, double tol) {
  ASSERT_EQ(y.numel(), int64_t(ref.size()));
  double scale = 1.0, err = 0.0;
  for (double v : ref) scale = std::max(scale, std::abs(v));
  for (int64_t i = 0; i < y.numel(); ++i) err = std::max(err, std::abs(y.item_as_double(i) - ref[size_t(i)]));
  EXPECT_LE(err, tol * scale) << "max abs err " << err << " scale " << scale;
}

struct MatMulCase {
  Shape a, b;
};

TEST(MatMul, BroadcastBatchesAndVectorsMatchReference) {
  const std::vector<MatMulCase> cases = {
      {{3, 4}, {4, 5}},
      {{2, 3, 4}, {4, 5}},
      {{2, 3, 4}, {2, 4, 5}},
      {{4}, {4, 5}},
      {{3, 4}, {4}},
      {{4}, {4}},
      {{2, 1, 3, 4}, {5, 4, 6}},
      {{1, 3, 4}, {7, 4, 2}},
      {{3, 1, 2, 8}, {1, 4, 8, 3}},
      {{2, 3, 64}, {2, 64, 33}},
      {{5}, {2, 5, 3}},
      {{2, 2, 3, 5}, {5}},
  };
  uint32_t seed = 1;
  for (const auto& c : cases) {
    for (DType t : {DType::Float32, DType::Float64}) {
      SCOPED_TRACE(to_string(c.a) + " x " + to_string(c.b) + " " + dtype_name(t));
      Tensor a = t == DType::Float32 ? random_tensor<float>(c.a, seed) : random_tensor<double>(c.a, seed);
      Tensor b = t == DType::Float32 ? random_tensor<float>(c.b, seed + 7) : random_tensor<double>(c.b, seed + 7);
      ++seed;
      Shape out_shape;
      const std::vector<double> ref = ref_matmul(a, b, out_shape);
      const Tensor y = run_node(node_of("MatMul", 2), {a, b}).at(0);
      EXPECT_EQ(y.shape(), out_shape);
      EXPECT_EQ(y.dtype(), t);
      expect_close(y, ref, t == DType::Float32 ? 1e-5 : 1e-12);
    }
  }
}

// A copy of x with its last two axes swapped.
Tensor swap_last2(const Tensor& x) {
  const Shape& s = x.shape();
  const int64_t rows = s[s.size() - 2], cols = s.back(), plane = rows * cols;
  Shape t = s;
  std::swap(t[t.size() - 1], t[t.size() - 2]);
  Tensor y = Tensor::empty(x.dtype(), t);
  const size_t elem = x.nbytes() / static_cast<size_t>(std::max<int64_t>(x.numel(), 1));
  const auto* src = static_cast<const unsigned char*>(x.raw_data());
  auto* dst = static_cast<unsigned char*>(y.raw_data());
  for (int64_t p = 0; p < x.numel() / std::max<int64_t>(plane, 1); ++p)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        std::memcpy(dst + static_cast<size_t>(p * plane + c * rows + r) * elem,
                    src + static_cast<size_t>(p * plane + r * cols + c) * elem, elem);
  return y;
}

Node fused_matmul(int64_t ta, int64_t tb) {
  Node n = node_of("FusedMatMul", 2, {{"transA", Attribute::of_int(ta)}, {"transB", Attribute::of_int(tb)}});
  n.domain = kKilnDomain;
  return n;
}

// FusedMatMul(A stored transposed, B stored transposed) is MatMul(A, B), for every flag, shared and
// batched (broadcast) B, both float types.
TEST(FusedMatMul, TransposedOperandsMatchTheReference) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}}, {{2, 3, 4}, {4, 5}}, {{3, 4}, {2, 4, 5}}, {{2, 1, 3, 4}, {3, 4, 2}}, {{2, 6, 8}, {2, 8, 7}}};
  uint32_t seed = 100;
  for (const auto& [as, bs] : cases)
    for (DType t : {DType::Float32, DType::Float64})
      for (int64_t ta : {0, 1})
        for (int64_t tb : {0, 1}) {
          SCOPED_TRACE(
              fmt::format("{} x {} {} transA {} transB {}", to_string(as), to_string(bs), dtype_name(t), ta, tb));
          const Tensor a = t == DType::Float32 ? random_tensor<float>(as, seed) : random_tensor<double>(as, seed);
          const Tensor b =
              t == DType::Float32 ? random_tensor<float>(bs, seed + 7) : random_tensor<double>(bs, seed + 7);
          ++seed;
          Shape out_shape;
          const std::vector<double> ref = ref_matmul(a, b, out_shape);
          const Tensor y = run_node(fused_matmul(ta, tb), {ta ? swap_last2(a) : a, tb ? swap_last2(b) : b}).at(0);
          EXPECT_EQ(y.shape(), out_shape);
          expect_close(y, ref, t == DType::Float32 ? 1e-5 : 1e-12);
        }
}

// ONNX's MatMul has no attributes: a stray transA/transB on one is not FusedMatMul's flag.
TEST(FusedMatMul, OnnxMatMulIgnoresTransposeAttributes) {
  const Tensor a = random_tensor<float>({3, 4}, 11), b = random_tensor<float>({4, 5}, 12);
  Shape out_shape;
  const std::vector<double> ref = ref_matmul(a, b, out_shape);
  const Tensor y =
      run_node(node_of("MatMul", 2, {{"transA", Attribute::of_int(1)}, {"transB", Attribute::of_int(1)}}), {a, b})
          .at(0);
  EXPECT_EQ(y.shape(), out_shape);
  expect_close(y, ref, 1e-5);
}

TEST(FusedMatMul, TransposedVectorAndInnerMismatchAreShapeErrors) {
  expect_error<ShapeError>(
      [&] {
        run_node(fused_matmul(1, 0), {random_tensor<float>({4}, 1), random_tensor<float>({4, 5}, 2)});
      },
      "transA needs A of rank >= 2, got float[4]");
  expect_error<ShapeError>(
      [&] {
        run_node(fused_matmul(0, 1), {random_tensor<float>({3, 4}, 1), random_tensor<float>({4, 5}, 2)});
      },
      "inner dims 4 vs 5");
}

TEST(MatMul, IntegerIsExact) {
  Tensor a = Tensor::from_vector<int64_t>({2, 2, 3}, {1, 2, 3, 4, 5, 6, -1, 0, 2, 7, 8, 9});
  Tensor b = Tensor::from_vector<int64_t>({3, 2}, {1, 0, 0, 1, 2, -3});
  Tensor y = run_node(node_of("MatMul", 2), {a, b}).at(0);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 2}));
  const std::vector<int64_t> want = {7, -7, 16, -13, 3, -6, 25, -19};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(y.data<int64_t>()[i], want[i]) << i;
  Tensor a32 = Tensor::from_vector<int32_t>({3}, {1, 2, 3});
  Tensor b32 = Tensor::from_vector<int32_t>({3}, {4, 5, 6});
  Tensor y32 = run_node(node_of("MatMul", 2), {a32, b32}).at(0);
  EXPECT_EQ(y32.shape(), Shape{});
  EXPECT_EQ(y32.data<int32_t>()[0], 32);
}

TEST(MatMul, EmptyInnerDimGivesZeros) {
  Tensor a = Tensor::empty(DType::Float32, {3, 0});
  Tensor b = Tensor::empty(DType::Float32, {0, 2});
  Tensor y = run_node(node_of("MatMul", 2), {a, b}).at(0);
  ASSERT_EQ(y.shape(), (Shape{3, 2}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(y.data<float>()[i], 0.f);
}

TEST(MatMul, InnerDimMismatchNamesBothShapes) {
  expect_error<ShapeError>(
      [&] {
        run_node(node_of("MatMul", 2), {random_tensor<float>({2, 3}, 1), random_tensor<float>({4, 5}, 2)});
      },
      {"cannot multiply float[2, 3] by float[4, 5] (inner dims 3 vs 4)", "node 'mm' (MatMul)"});
  EXPECT_THROW(run_node(node_of("MatMul", 2), {random_tensor<float>({2, 3, 4}, 1), random_tensor<float>({3, 4, 5}, 2)}),
               ShapeError);
  EXPECT_THROW(run_node(node_of("MatMul", 2), {random_tensor<float>({3, 4}, 1), random_tensor<double>({4, 5}, 2)}),
               TypeError);
}

// ---------------------------------------------------------------------------------------------
// Gemm

std::vector<double> ref_gemm(const Tensor& a, const Tensor& b, const Tensor* c, bool ta, bool tb, double alpha,
                             double beta) {
  const int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1), n = tb ? b.dim(0) : b.dim(1);
  std::vector<double> y(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += a.item_as_double(ta ? p * m + i : i * k + p) * b.item_as_double(tb ? j * k + p : p * n + j);
      double cv = 0;
      if (c) {
        const Shape& cs = c->shape();
        const int64_t cm = cs.size() == 2 ? cs[0] : 1, cn = cs.empty() ? 1 : cs.back();
        cv = c->item_as_double((cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j));
      }
      y[size_t(i * n + j)] = alpha * s + beta * cv;
    }
  return y;
}

TEST(Gemm, TransposesScalesAndBroadcastBiasMatchReference) {
  const int64_t m = 5, k = 7, n = 6;
  const std::vector<Shape> c_shapes = {{}, {1}, {n}, {1, n}, {m, 1}, {m, n}};
  uint32_t seed = 100;
  for (DType t : {DType::Float32, DType::Float64})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (size_t ci = 0; ci <= c_shapes.size(); ++ci) {
          const bool has_c = ci < c_shapes.size();
          const float alpha = 0.75f, beta = has_c && ci % 2 ? 1.5f : 1.f;
          SCOPED_TRACE(::testing::Message() << dtype_name(t) << " transA=" << ta << " transB=" << tb
                                            << " C=" << (has_c ? to_string(c_shapes[ci]) : "none"));
          auto rnd = [&](const Shape& s) {
            return t == DType::Float32 ? random_tensor<float>(s, seed++) : random_tensor<double>(s, seed++);
          };
          Tensor a = rnd(ta ? Shape{k, m} : Shape{m, k});
          Tensor b = rnd(tb ? Shape{n, k} : Shape{k, n});
          Tensor c = has_c ? rnd(c_shapes[ci]) : Tensor();
          Node node = node_of("Gemm", has_c ? 3 : 2,
                              {{"transA", Attribute::of_int(ta)},
                               {"transB", Attribute::of_int(tb)},
                               {"alpha", Attribute::of_float(alpha)},
                               {"beta", Attribute::of_float(beta)}});
          std::vector<Tensor> in = {a, b};
          if (has_c) in.push_back(c);
          Tensor y = run_node(node, in).at(0);
          EXPECT_EQ(y.shape(), (Shape{m, n}));
          expect_close(y, ref_gemm(a, b, has_c ? &c : nullptr, ta, tb, alpha, beta),
                       t == DType::Float32 ? 1e-5 : 1e-12);
        }
}

TEST(Gemm, ShapeErrorsNameTheOperands) {
  Node node = node_of("Gemm", 3, {{"transA", Attribute::of_int(1)}});
  expect_error<ShapeError>(
      [&] {
        run_node(node,
                 {random_tensor<float>({3, 5}, 1), random_tensor<float>({4, 6}, 2), random_tensor<float>({6}, 3)});
      },
      "A float[3, 5] (transA=1: 5x3) by B float[4, 6]");
  expect_error<ShapeError>(
      [&] {
        run_node(node_of("Gemm", 3),
                 {random_tensor<float>({4, 3}, 1), random_tensor<float>({3, 5}, 2), random_tensor<float>({3, 5}, 3)});
      },
      "C float[3, 5] does not broadcast to the output [M, N] = [4, 5]");
}

}  // namespace
}  // namespace kiln

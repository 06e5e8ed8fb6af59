// Gradient rules of MatMul and Gemm (kernels/cpu/matmul.cpp), as matrix products.
#include <fmt/format.h>

#include <numeric>

#include "autodiff/registry.h"

namespace kiln {
namespace {

// Swaps the last two axes of a value of known rank.
std::string transpose_last2(GradContext& g, const std::string& v, int64_t rank) {
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return g.emit("Transpose", {v}, {{"perm", Attribute::of_ints(perm)}});
}

// Y = A @ B (batched, broadcasting): dA = G @ B^T, dB = A^T @ G, each reduced to its input's shape.
// 1-D operands are lifted to matrices first, as numpy does, and the gradient dropped back.
void matmul_grad(GradContext& g) {
  const auto ra = g.rank(g.I(0));
  const auto rb = g.rank(g.I(1));
  if (!ra || !rb)
    throw Unsupported(fmt::format("MatMul gradient needs the ranks of '{}' and '{}'; they are unknown{}", g.I(0),
                                  g.I(1), g.unknown_rank_reason()));
  std::string a = g.I(0), b = g.I(1), grad = g.GO(0);
  int64_t rank_a = *ra, rank_b = *rb;
  const auto axes = [&](int64_t ax) { return g.constant(Tensor::from_vector<int64_t>({1}, {ax})); };
  if (rank_a == 1) {
    a = g.emit("Unsqueeze", {a, axes(0)});
    rank_a = 2;
    grad = g.emit("Unsqueeze", {grad, axes(-2)});  // Y lost the M axis
  }
  if (rank_b == 1) {
    b = g.emit("Unsqueeze", {b, axes(1)});
    rank_b = 2;
    grad = g.emit("Unsqueeze", {grad, axes(-1)});  // Y lost the N axis
  }
  if (g.needs(0)) {
    std::string da = g.emit("MatMul", {grad, transpose_last2(g, b, rank_b)});
    if (*ra == 1) da = g.emit("Reshape", {da, g.emit("Shape", {g.I(0)})});
    else da = g.emit(kKilnDomain, "SumToShapeOf", {da, g.I(0)});
    g.set_GI(0, da);
  }
  if (g.needs(1)) {
    std::string db = g.emit("MatMul", {transpose_last2(g, a, rank_a), grad});
    if (*rb == 1) db = g.emit("Reshape", {db, g.emit("Shape", {g.I(1)})});
    else db = g.emit(kKilnDomain, "SumToShapeOf", {db, g.I(1)});
    g.set_GI(1, db);
  }
}

Attribute i(int64_t v) { return Attribute::of_int(v); }
Attribute f(float v) { return Attribute::of_float(v); }

// Y = alpha * A' @ B' + beta * C with A' = transA ? A^T : A and B' likewise.
void gemm_grad(GradContext& g) {
  const float alpha = g.node.attr_float("alpha", 1.f);
  const float beta = g.node.attr_float("beta", 1.f);
  const int64_t ta = g.node.attr_int("transA", 0);
  const int64_t tb = g.node.attr_int("transB", 0);
  const std::string& G = g.GO(0).empty() ? g.GO_or_zeros(0) : g.GO(0);
  if (g.needs(0)) {
    // dA' = alpha * G @ B'^T; with transA, dA = dA'^T = alpha * B' @ G^T.
    const std::string da =
        ta == 0 ? g.emit("Gemm", {G, g.I(1)}, {{"alpha", f(alpha)}, {"transB", i(tb ? 0 : 1)}})
                : g.emit("Gemm", {g.I(1), G}, {{"alpha", f(alpha)}, {"transA", i(tb)}, {"transB", i(1)}});
    g.set_GI(0, da);
  }
  if (g.needs(1)) {
    // dB' = alpha * A'^T @ G; with transB, dB = alpha * G^T @ A'.
    const std::string db =
        tb == 0 ? g.emit("Gemm", {g.I(0), G}, {{"alpha", f(alpha)}, {"transA", i(ta ? 0 : 1)}})
                : g.emit("Gemm", {G, g.I(0)}, {{"alpha", f(alpha)}, {"transA", i(1)}, {"transB", i(ta)}});
    g.set_GI(1, db);
  }
  if (g.has_input(2) && g.needs(2)) {
    const std::string dc = beta == 1.f ? G : g.emit("Mul", {G, g.scalar_like(beta, g.I(2))});
    g.set_GI(2, dc, Broadcast::Maybe);
  }
}

const GradientRegistrar r_matmul({"", "MatMul", 1, kMaxOpset}, matmul_grad);
const GradientRegistrar r_gemm({"", "Gemm", 1, kMaxOpset}, gemm_grad);

}  // namespace
}  // namespace kiln

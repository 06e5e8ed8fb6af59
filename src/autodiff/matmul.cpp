// Gradient rules of MatMul and Gemm (kernels/cpu/matmul.cpp), as matrix products.
#include <fmt/format.h>

#include "autodiff/matmul_products.h"
#include "autodiff/registry.h"

namespace kiln {
namespace {

Attribute i(int64_t v) { return Attribute::of_int(v); }
Attribute f(float v) { return Attribute::of_float(v); }

// MatMul: 1-D operands are lifted to matrices first, as numpy does, and their gradient dropped
// back to 1-D.
void matmul_grad(GradContext& g) {
  const auto ranks = matmul::operand_ranks(g, "MatMul");  // not a structured binding: the lambda below uses them
  const int64_t ra = ranks.first, rb = ranks.second;
  std::string a = g.I(0), b = g.I(1), grad = g.GO(0);
  int64_t rank_a = ra, rank_b = rb;
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
  const bool weight_product = rank_b == 2 && rank_a > 2;  // dB comes out in B's shape
  matmul::product_grads(g, a, rank_a, false, b, rank_b, false, grad, [&](int input, const std::string& d) {
    const std::string& x = g.I(static_cast<size_t>(input));
    if ((input == 0 ? ra : rb) == 1) return g.emit("Reshape", {d, g.emit("Shape", {x})});
    if (input == 1 && weight_product) return d;
    return g.emit(kKilnDomain, "SumToShapeOf", {d, x});
  });
}

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

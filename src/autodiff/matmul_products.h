// The products the MatMul-family gradient rules emit (autodiff/matmul.cpp: MatMul;
// autodiff/matmul_grad.cpp: ai.kiln.FusedMatMul).
#pragma once

#include <fmt/format.h>

#include <functional>
#include <string>
#include <utility>

#include "autodiff/registry.h"

namespace kiln::matmul {

// The ranks of both operands, which the rules need; Unsupported naming `op` when one is unknown.
inline std::pair<int64_t, int64_t> operand_ranks(GradContext& g, const char* op) {
  const auto ra = g.rank(g.I(0));
  const auto rb = g.rank(g.I(1));
  if (!ra || !rb)
    throw Unsupported(fmt::format("{} gradient needs the ranks of '{}' and '{}'; they are unknown{}", op, g.I(0),
                                  g.I(1), g.unknown_rank_reason()));
  return {*ra, *rb};
}

// op(a) @ op(b), op transposing the last two axes where asked: ai.kiln.FusedMatMul reads a
// transposed operand in place, without a Transpose's copy.
inline std::string product(GradContext& g, const std::string& a, bool ta, const std::string& b, bool tb) {
  if (!ta && !tb) return g.emit("MatMul", {a, b});
  return g.emit(kKilnDomain, "FusedMatMul", {a, b},
                {{"transA", Attribute::of_int(ta)}, {"transB", Attribute::of_int(tb)}});
}

// Y = op(A) @ op(B) (batched, broadcasting) with dY = G:
//   dA = G @ op(B)^T, or op(B) @ G^T when A is read transposed;
//   dB = op(A)^T @ G, or G^T @ op(A) when B is read transposed;
// each reduced to its operand's shape. A shared matrix B under a batched A (a Linear layer:
// A [..., M, K], B [K, N], or B [N, K] read transposed) gets its gradient as one product over every
// row at once, flatten(A)^T @ flatten(G) (flatten(G)^T @ flatten(A)), already in B's shape, rather
// than one small product per batch and a sum.
inline void product_grads(GradContext& g, const std::string& a, int64_t rank_a, bool ta, const std::string& b,
                          int64_t rank_b, bool tb, const std::string& grad,
                          const std::function<std::string(int, const std::string&)>& finish) {
  if (g.needs(0)) {
    const std::string da = ta ? product(g, b, tb, grad, true) : product(g, grad, false, b, !tb);
    g.set_GI(0, finish(0, da));
  }
  if (g.needs(1)) {
    std::string db;
    if (rank_b == 2 && rank_a > 2 && !ta) {  // B's own layout: flat(A)^T flat(G), or flat(G)^T flat(A)
      const Attribute axis = Attribute::of_int(rank_a - 1);
      const std::string fa = g.emit("Flatten", {a}, {{"axis", axis}}), fg = g.emit("Flatten", {grad}, {{"axis", axis}});
      db = tb ? product(g, fg, true, fa, false) : product(g, fa, true, fg, false);
    } else {
      db = tb ? product(g, grad, true, a, ta) : product(g, a, !ta, grad, false);
    }
    g.set_GI(1, finish(1, db));
  }
}

}  // namespace kiln::matmul

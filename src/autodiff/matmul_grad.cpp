// Gradient rule of ai.kiln.FusedMatMul (kernels/cpu/matmul_grad.cpp): as MatMul's, with the
// operands' transposes folded into the products' flags.
#include "autodiff/matmul_products.h"
#include "autodiff/registry.h"

namespace kiln {
namespace {

// ai.kiln.FusedMatMul: both operands have rank >= 2.
void fused_matmul_grad(GradContext& g) {
  const auto [ra, rb] = matmul::operand_ranks(g, "FusedMatMul");
  const bool ta = g.node.attr_int("transA", 0) != 0, tb = g.node.attr_int("transB", 0) != 0;
  const bool weight_product = rb == 2 && ra > 2 && !ta;  // dB comes out in B's shape (product_grads)
  matmul::product_grads(g, g.I(0), ra, ta, g.I(1), rb, tb, g.GO(0), [&](int input, const std::string& d) {
    if (input == 1 && weight_product) return d;
    return g.emit(kKilnDomain, "SumToShapeOf", {d, g.I(static_cast<size_t>(input))});
  });
}

const GradientRegistrar r_fused_matmul({kKilnDomain, "FusedMatMul", 1, kMaxOpset}, fused_matmul_grad);

}  // namespace
}  // namespace kiln

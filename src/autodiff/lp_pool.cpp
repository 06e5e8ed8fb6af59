// Gradient rules of LpPool and GlobalLpPool (kernels/cpu/lp_pool.cpp): y = (sum |x|^p)^(1/p), so
// dy/dx = sign(x) |x|^(p-1) / y^(p-1). LpPool's windows need ai.kiln.LpPoolGrad
// (kernels/cpu/lp_pool_grad.cpp); the global pool's single window is standard broadcasting ops.
#include <fmt/format.h>

#include "autodiff/registry.h"

namespace kiln {
namespace {

double p_of(const Node& node) {
  const auto it = node.attrs.find("p");
  if (it == node.attrs.end()) return 2.0;
  return it->second.kind == Attribute::Kind::Float ? double(it->second.f) : double(it->second.i);
}

void lp_pool_grad(GradContext& g) {
  g.set_GI(0, g.emit(kKilnDomain, "LpPoolGrad", {g.GO_or_zeros(0), g.I(0), g.O(0)}, g.node.attrs));
}

void global_lp_pool_grad(GradContext& g) {
  const double p = p_of(g.node);
  const std::string x = g.I(0), y = g.O(0);
  std::string d;  // dY/dX, broadcasting y over the spatial dims
  if (p == 1) {
    d = g.emit("Sign", {x});
  } else if (p == 2) {
    d = g.emit("Div", {x, y});
  } else {
    const std::string e = g.scalar_like(p - 1, x);
    d = g.emit("Div",
               {g.emit("Mul", {g.emit("Sign", {x}), g.emit("Pow", {g.emit("Abs", {x}), e})}), g.emit("Pow", {y, e})});
  }
  g.set_GI(0, g.emit("Mul", {d, g.GO(0)}));
}

const GradientRegistrar r_lp({"", "LpPool", 1, kMaxOpset}, lp_pool_grad);
const GradientRegistrar r_global_lp({"", "GlobalLpPool", 1, kMaxOpset}, global_lp_pool_grad);

}  // namespace
}  // namespace kiln

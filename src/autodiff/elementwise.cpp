// Gradient rules of the elementwise arithmetic ops (kernels/cpu/elementwise.cpp). Binary ops hand
// the builder gradients of the broadcast output shape; it reduces them to each input's shape.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void add_grad(GradContext& g) {
  g.set_GI(0, g.GO(0), Broadcast::Maybe);
  g.set_GI(1, g.GO(0), Broadcast::Maybe);
}

void sub_grad(GradContext& g) {
  g.set_GI(0, g.GO(0), Broadcast::Maybe);
  if (g.needs(1)) g.set_GI(1, g.emit("Neg", {g.GO(0)}), Broadcast::Maybe);
}

void mul_grad(GradContext& g) {
  if (g.needs(0)) g.set_GI(0, g.emit("Mul", {g.GO(0), g.I(1)}), Broadcast::Maybe);
  if (g.needs(1)) g.set_GI(1, g.emit("Mul", {g.GO(0), g.I(0)}), Broadcast::Maybe);
}

// y = a / b: da = g / b, db = -g * y / b.
void div_grad(GradContext& g) {
  if (g.needs(0)) g.set_GI(0, g.emit("Div", {g.GO(0), g.I(1)}), Broadcast::Maybe);
  if (g.needs(1))
    g.set_GI(1, g.emit("Neg", {g.emit("Div", {g.emit("Mul", {g.GO(0), g.O(0)}), g.I(1)})}), Broadcast::Maybe);
}

// y = a ^ b: da = g * b * a^(b-1), db = g * y * ln(a).
void pow_grad(GradContext& g) {
  if (g.needs(0)) {
    const std::string one = g.scalar_like(1.0, g.I(1));
    const std::string a_pow = g.emit("Pow", {g.I(0), g.emit("Sub", {g.I(1), one})});
    g.set_GI(0, g.emit("Mul", {g.GO(0), g.emit("Mul", {g.I(1), a_pow})}), Broadcast::Maybe);
  }
  if (g.needs(1))
    g.set_GI(1, g.emit("Mul", {g.GO(0), g.emit("Mul", {g.O(0), g.emit("Log", {g.I(0)})})}), Broadcast::Maybe);
}

void neg_grad(GradContext& g) { g.set_GI(0, g.emit("Neg", {g.GO(0)})); }
void exp_grad(GradContext& g) { g.set_GI(0, g.emit("Mul", {g.GO(0), g.O(0)})); }
void log_grad(GradContext& g) { g.set_GI(0, g.emit("Div", {g.GO(0), g.I(0)})); }

// y = sqrt(x): dx = g / (2 y).
void sqrt_grad(GradContext& g) {
  g.set_GI(0, g.emit("Div", {g.GO(0), g.emit("Mul", {g.O(0), g.scalar_like(2.0, g.O(0))})}));
}

// y = 1/x: dx = -g * y^2.
void reciprocal_grad(GradContext& g) {
  g.set_GI(0, g.emit("Neg", {g.emit("Mul", {g.GO(0), g.emit("Mul", {g.O(0), g.O(0)})})}));
}

void abs_grad(GradContext& g) { g.set_GI(0, g.emit("Mul", {g.GO(0), g.emit("Sign", {g.I(0)})})); }

// erf'(x) = 2/sqrt(pi) * exp(-x^2).
void erf_grad(GradContext& g) {
  const std::string x2 = g.emit("Mul", {g.I(0), g.I(0)});
  const std::string e = g.emit("Exp", {g.emit("Neg", {x2})});
  g.set_GI(0, g.emit("Mul", {g.GO(0), g.emit("Mul", {e, g.scalar_like(1.1283791670955126, g.I(0))})}));
}

const GradientRegistrar r_add({"", "Add", 1, kMaxOpset}, add_grad);
const GradientRegistrar r_sub({"", "Sub", 1, kMaxOpset}, sub_grad);
const GradientRegistrar r_mul({"", "Mul", 1, kMaxOpset}, mul_grad);
const GradientRegistrar r_div({"", "Div", 1, kMaxOpset}, div_grad);
const GradientRegistrar r_pow({"", "Pow", 1, kMaxOpset}, pow_grad);
const GradientRegistrar r_neg({"", "Neg", 1, kMaxOpset}, neg_grad);
const GradientRegistrar r_exp({"", "Exp", 1, kMaxOpset}, exp_grad);
const GradientRegistrar r_log({"", "Log", 1, kMaxOpset}, log_grad);
const GradientRegistrar r_sqrt({"", "Sqrt", 1, kMaxOpset}, sqrt_grad);
const GradientRegistrar r_recip({"", "Reciprocal", 1, kMaxOpset}, reciprocal_grad);
const GradientRegistrar r_abs({"", "Abs", 1, kMaxOpset}, abs_grad);
const GradientRegistrar r_erf({"", "Erf", 1, kMaxOpset}, erf_grad);

// Piecewise-constant or integer-valued ops: zero gradient almost everywhere, as in PyTorch.
const NoGradient none({{"", "Floor", 1, kMaxOpset},
                       {"", "Ceil", 1, kMaxOpset},
                       {"", "Round", 1, kMaxOpset},
                       {"", "Sign", 1, kMaxOpset},
                       {"", "Mod", 1, kMaxOpset},
                       {"", "BitShift", 1, kMaxOpset}});

}  // namespace
}  // namespace kiln

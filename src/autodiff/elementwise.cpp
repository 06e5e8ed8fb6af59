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

// Casting between float types passes the gradient back in the input's dtype.
void cast_grad(GradContext& g) {
  const auto t = g.dtype(g.I(0));
  if (!t) return;
  g.set_GI(0, g.emit("Cast", {g.GO(0)}, {{"to", Attribute::of_int(dtype_to_onnx(*t))}}));
}

// Sum / Mean / Max / Min with any number of broadcasting inputs.
void sum_grad(GradContext& g) {
  for (size_t i = 0; i < g.num_inputs(); ++i) g.set_GI(i, g.GO(0), Broadcast::Maybe);
}

void mean_grad(GradContext& g) {
  const std::string scaled =
      g.emit("Div", {g.GO(0), g.scalar_like(static_cast<double>(g.num_inputs()), g.O(0))});
  for (size_t i = 0; i < g.num_inputs(); ++i) g.set_GI(i, scaled, Broadcast::Maybe);
}

// Max/Min: the gradient goes where the input equals the result (to every tied input, as PyTorch's
// max(a, b) splits evenly only for its two-input form; ONNX has no rule — this is ORT's choice).
void extremum_grad(GradContext& g) {
  for (size_t i = 0; i < g.num_inputs(); ++i) {
    if (!g.needs(i)) continue;
    const std::string mask = g.emit("Cast", {g.emit("Equal", {g.I(i), g.O(0)})},
                                    {{"to", Attribute::of_int(dtype_to_onnx(g.dtype(g.O(0)).value_or(DType::Float32)))}});
    g.set_GI(i, g.emit("Mul", {g.GO(0), mask}), Broadcast::Maybe);
  }
}

const GradientRegistrar r_add({"", "Add"}, add_grad);
const GradientRegistrar r_sub({"", "Sub"}, sub_grad);
const GradientRegistrar r_mul({"", "Mul"}, mul_grad);
const GradientRegistrar r_div({"", "Div"}, div_grad);
const GradientRegistrar r_pow({"", "Pow"}, pow_grad);
const GradientRegistrar r_neg({"", "Neg"}, neg_grad);
const GradientRegistrar r_exp({"", "Exp"}, exp_grad);
const GradientRegistrar r_log({"", "Log"}, log_grad);
const GradientRegistrar r_sqrt({"", "Sqrt"}, sqrt_grad);
const GradientRegistrar r_recip({"", "Reciprocal"}, reciprocal_grad);
const GradientRegistrar r_abs({"", "Abs"}, abs_grad);
const GradientRegistrar r_erf({"", "Erf"}, erf_grad);
const GradientRegistrar r_sum({"", "Sum"}, sum_grad);
const GradientRegistrar r_mean({"", "Mean"}, mean_grad);
const GradientRegistrar r_max({"", "Max"}, extremum_grad);
const GradientRegistrar r_min({"", "Min"}, extremum_grad);
const GradientRegistrar r_cast({"", "Cast"}, cast_grad);
const GradientRegistrar r_castlike({"", "CastLike"}, cast_grad);

// Piecewise-constant or integer-valued ops: zero gradient almost everywhere, as in PyTorch.
const NoGradient none({{"", "Floor"}, {"", "Ceil"}, {"", "Round"}, {"", "Sign"}, {"", "Mod"},
                       {"", "Equal"}, {"", "Less"}, {"", "Greater"}, {"", "LessOrEqual"}, {"", "GreaterOrEqual"},
                       {"", "Not"}, {"", "And"}, {"", "Or"}, {"", "Xor"}, {"", "IsNaN"}, {"", "IsInf"},
                       {"", "BitShift"}});

}  // namespace
}  // namespace kiln

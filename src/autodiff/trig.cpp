// Gradient rules of the trigonometric and hyperbolic ops (kernels/cpu/trig.cpp), in standard ONNX
// ops. Each derivative is written from the input (or the output where that is cheaper and exact).
#include "autodiff/registry.h"

namespace kiln {
namespace {

std::string square(GradContext& g, const std::string& v) { return g.emit("Mul", {v, v}); }
std::string one(GradContext& g) { return g.scalar_like(1.0, g.I(0)); }

// d sin = cos.
void sin_grad(GradContext& g) { g.set_GI(0, g.emit("Mul", {g.GO(0), g.emit("Cos", {g.I(0)})})); }
// d cos = -sin.
void cos_grad(GradContext& g) { g.set_GI(0, g.emit("Neg", {g.emit("Mul", {g.GO(0), g.emit("Sin", {g.I(0)})})})); }
// d tan = 1 + tan^2 (from the output: no second trig call).
void tan_grad(GradContext& g) { g.set_GI(0, g.emit("Mul", {g.GO(0), g.emit("Add", {one(g), square(g, g.O(0))})})); }
// d asin = 1 / sqrt(1 - x^2); d acos is its negation.
std::string asin_derivative(GradContext& g) {
  return g.emit("Div", {g.GO(0), g.emit("Sqrt", {g.emit("Sub", {one(g), square(g, g.I(0))})})});
}
void asin_grad(GradContext& g) { g.set_GI(0, asin_derivative(g)); }
void acos_grad(GradContext& g) { g.set_GI(0, g.emit("Neg", {asin_derivative(g)})); }
// d atan = 1 / (1 + x^2).
void atan_grad(GradContext& g) { g.set_GI(0, g.emit("Div", {g.GO(0), g.emit("Add", {one(g), square(g, g.I(0))})})); }
// d sinh = cosh, d cosh = sinh.
void sinh_grad(GradContext& g) { g.set_GI(0, g.emit("Mul", {g.GO(0), g.emit("Cosh", {g.I(0)})})); }
void cosh_grad(GradContext& g) { g.set_GI(0, g.emit("Mul", {g.GO(0), g.emit("Sinh", {g.I(0)})})); }
// d asinh = 1 / sqrt(x^2 + 1), d acosh = 1 / sqrt(x^2 - 1) (x > 1).
void asinh_grad(GradContext& g) {
  g.set_GI(0, g.emit("Div", {g.GO(0), g.emit("Sqrt", {g.emit("Add", {square(g, g.I(0)), one(g)})})}));
}
void acosh_grad(GradContext& g) {
  g.set_GI(0, g.emit("Div", {g.GO(0), g.emit("Sqrt", {g.emit("Sub", {square(g, g.I(0)), one(g)})})}));
}
// d atanh = 1 / (1 - x^2).
void atanh_grad(GradContext& g) { g.set_GI(0, g.emit("Div", {g.GO(0), g.emit("Sub", {one(g), square(g, g.I(0))})})); }

const GradientRegistrar r_sin({"", "Sin", 1, kMaxOpset}, sin_grad);
const GradientRegistrar r_cos({"", "Cos", 1, kMaxOpset}, cos_grad);
const GradientRegistrar r_tan({"", "Tan", 1, kMaxOpset}, tan_grad);
const GradientRegistrar r_asin({"", "Asin", 1, kMaxOpset}, asin_grad);
const GradientRegistrar r_acos({"", "Acos", 1, kMaxOpset}, acos_grad);
const GradientRegistrar r_atan({"", "Atan", 1, kMaxOpset}, atan_grad);
const GradientRegistrar r_sinh({"", "Sinh", 1, kMaxOpset}, sinh_grad);
const GradientRegistrar r_cosh({"", "Cosh", 1, kMaxOpset}, cosh_grad);
const GradientRegistrar r_asinh({"", "Asinh", 1, kMaxOpset}, asinh_grad);
const GradientRegistrar r_acosh({"", "Acosh", 1, kMaxOpset}, acosh_grad);
const GradientRegistrar r_atanh({"", "Atanh", 1, kMaxOpset}, atanh_grad);

}  // namespace
}  // namespace kiln

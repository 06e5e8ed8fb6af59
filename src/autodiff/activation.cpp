// Gradient rules of the activations (kernels/cpu/activation.cpp), in standard ONNX ops.
#include "autodiff/registry.h"

namespace kiln {
namespace {

std::string zero_like(GradContext& g, const std::string& v) { return g.scalar_like(0.0, v); }

// y = max(x, 0): dx = g where y > 0 (PyTorch's convention: 0 at x == 0).
void relu_grad(GradContext& g) {
  const std::string pos = g.emit("Greater", {g.O(0), zero_like(g, g.O(0))});
  g.set_GI(0, g.emit("Where", {pos, g.GO(0), zero_like(g, g.O(0))}));
}

void leaky_relu_grad(GradContext& g) {
  const float alpha = g.node.attr_float("alpha", 0.01f);
  const std::string pos = g.emit("Greater", {g.I(0), zero_like(g, g.I(0))});
  const std::string scaled = g.emit("Mul", {g.GO(0), g.scalar_like(alpha, g.I(0))});
  g.set_GI(0, g.emit("Where", {pos, g.GO(0), scaled}));
}

// y = sigmoid(x): dx = g * y * (1 - y).
void sigmoid_grad(GradContext& g) {
  const std::string one_minus = g.emit("Sub", {g.scalar_like(1.0, g.O(0)), g.O(0)});
  g.set_GI(0, g.emit("Mul", {g.GO(0), g.emit("Mul", {g.O(0), one_minus})}));
}

// y = tanh(x): dx = g * (1 - y^2).
void tanh_grad(GradContext& g) {
  const std::string one_minus = g.emit("Sub", {g.scalar_like(1.0, g.O(0)), g.emit("Mul", {g.O(0), g.O(0)})});
  g.set_GI(0, g.emit("Mul", {g.GO(0), one_minus}));
}

// y = ln(1 + e^x): dx = g * sigmoid(x).
void softplus_grad(GradContext& g) { g.set_GI(0, g.emit("Mul", {g.GO(0), g.emit("Sigmoid", {g.I(0)})})); }

// y = x > 0 ? x : alpha (e^x - 1): dx = g where x > 0, else g * (y + alpha).
void elu_grad(GradContext& g) {
  const float alpha = g.node.attr_float("alpha", 1.0f);
  const std::string pos = g.emit("Greater", {g.I(0), zero_like(g, g.I(0))});
  const std::string neg = g.emit("Mul", {g.GO(0), g.emit("Add", {g.O(0), g.scalar_like(alpha, g.O(0))})});
  g.set_GI(0, g.emit("Where", {pos, g.GO(0), neg}));
}

// Clip: the gradient passes where min < x < max (PyTorch's clamp passes at the bounds too: we
// follow PyTorch, min <= x <= max).
void clip_grad(GradContext& g) {
  std::string inside;
  auto bound = [&](size_t i, const char* attr, const char* cmp) -> std::string {
    if (g.has_input(i)) return g.emit(cmp, {g.I(0), g.I(i)});
    if (g.node.has_attr(attr)) return g.emit(cmp, {g.I(0), g.scalar_like(g.node.attr_float(attr), g.I(0))});
    return "";
  };
  const std::string lo = bound(1, "min", "GreaterOrEqual");
  const std::string hi = bound(2, "max", "LessOrEqual");
  if (lo.empty() && hi.empty()) {
    g.set_GI(0, g.GO(0));
    return;
  }
  inside = lo.empty() ? hi : hi.empty() ? lo : g.emit("And", {lo, hi});
  g.set_GI(0, g.emit("Where", {inside, g.GO(0), zero_like(g, g.I(0))}));
}

const GradientRegistrar r_relu({"", "Relu"}, relu_grad);
const GradientRegistrar r_leaky({"", "LeakyRelu"}, leaky_relu_grad);
const GradientRegistrar r_sigmoid({"", "Sigmoid"}, sigmoid_grad);
const GradientRegistrar r_tanh({"", "Tanh"}, tanh_grad);
const GradientRegistrar r_softplus({"", "Softplus"}, softplus_grad);
const GradientRegistrar r_elu({"", "Elu"}, elu_grad);
const GradientRegistrar r_clip({"", "Clip"}, clip_grad);

}  // namespace
}  // namespace kiln

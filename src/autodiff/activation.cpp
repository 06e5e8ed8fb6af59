// Gradient rules of the activations (kernels/cpu/activation.cpp), in standard ONNX ops. At the kinks
// (x == 0 for PRelu, the thresholds of Shrink, HardSigmoid...) the gradient is that of the branch
// PyTorch picks: the one that is not the strict-inequality side.
#include "autodiff/registry.h"

namespace kiln {
namespace {

std::string zero_like(GradContext& g, const std::string& v) { return g.scalar_like(0.0, v); }

// y = max(x, 0): dx = g where y > 0 (PyTorch's convention: 0 at x == 0).
void relu_grad(GradContext& g) {
  const auto t = g.dtype(g.O(0));
  if (t == DType::Float32 || t == DType::Float64) {  // one fused pass
    g.set_GI(0, g.emit(kKilnDomain, "ReluGrad", {g.GO(0), g.O(0)}));
    return;
  }
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

// y = x > 0 ? x : alpha (e^(x/alpha) - 1): dx = g where x > 0, else g e^(x/alpha).
void celu_grad(GradContext& g) {
  const float alpha = g.node.attr_float("alpha", 1.0f);
  const std::string pos = g.emit("Greater", {g.I(0), zero_like(g, g.I(0))});
  const std::string e = g.emit("Exp", {g.emit("Div", {g.I(0), g.scalar_like(alpha, g.I(0))})});
  g.set_GI(0, g.emit("Where", {pos, g.GO(0), g.emit("Mul", {g.GO(0), e})}));
}

// approximate "none": y = x Phi(x), dy = Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2,
// phi(x) = e^(-x^2/2) / sqrt(2 pi).
// approximate "tanh": y = x (1 + t) / 2 with t = tanh(u), u = c (x + a x^3), c = sqrt(2/pi),
// a = 0.044715: dy = (1 + t) / 2 + x (1 - t^2) c (1 + 3 a x^2) / 2.
// Float types take ai.kiln.GeluGrad, one pass; others the standard ops below.
void gelu_grad(GradContext& g) {
  const std::string x = g.I(0);
  if (const auto t = g.dtype(x); t == DType::Float32 || t == DType::Float64) {
    g.set_GI(0, g.emit(kKilnDomain, "GeluGrad", {g.GO(0), x},
                       {{"approximate", Attribute::of_string(g.node.attr_string("approximate", "none"))}}));
    return;
  }
  auto k = [&](double v) { return g.scalar_like(v, x); };
  const std::string x2 = g.emit("Mul", {x, x});
  std::string d;
  if (g.node.attr_string("approximate", "none") == "tanh") {
    const double c = 0.7978845608028654, a = 0.044715;
    const std::string u = g.emit("Mul", {g.emit("Mul", {x, g.emit("Add", {k(1.0), g.emit("Mul", {x2, k(a)})})}), k(c)});
    const std::string t = g.emit("Tanh", {u});
    const std::string half_1pt = g.emit("Mul", {g.emit("Add", {k(1.0), t}), k(0.5)});
    const std::string sech2 = g.emit("Sub", {k(1.0), g.emit("Mul", {t, t})});
    const std::string du = g.emit("Mul", {g.emit("Add", {k(1.0), g.emit("Mul", {x2, k(3 * a)})}), k(0.5 * c)});
    d = g.emit("Add", {half_1pt, g.emit("Mul", {x, g.emit("Mul", {sech2, du})})});
  } else {
    const std::string cdf =
        g.emit("Mul", {g.emit("Add", {k(1.0), g.emit("Erf", {g.emit("Mul", {x, k(0.7071067811865476)})})}), k(0.5)});
    const std::string pdf =
        g.emit("Mul", {g.emit("Exp", {g.emit("Mul", {x2, k(-0.5)})}), k(0.3989422804014327)});  // 1/sqrt(2 pi)
    d = g.emit("Add", {cdf, g.emit("Mul", {x, pdf})});
  }
  g.set_GI(0, g.emit("Mul", {g.GO(0), d}));
}

// y = clamp(alpha x + beta, 0, 1): dx = g alpha where 0 < y < 1.
void hard_sigmoid_grad(GradContext& g) {
  const float alpha = g.node.attr_float("alpha", 0.2f);
  const std::string y = g.O(0);
  const std::string above = g.emit("Greater", {y, zero_like(g, y)});
  const std::string inside = g.emit("And", {above, g.emit("Less", {y, g.scalar_like(1.0, y)})});
  g.set_GI(0, g.emit("Where", {inside, g.emit("Mul", {g.GO(0), g.scalar_like(alpha, y)}), zero_like(g, y)}));
}

// y = x clamp(x/6 + 1/2, 0, 1): dx = 0 below -3, g above 3, g (x/3 + 1/2) between.
void hard_swish_grad(GradContext& g) {
  const std::string x = g.I(0);
  const std::string slope = g.emit("Add", {g.emit("Div", {x, g.scalar_like(3.0, x)}), g.scalar_like(0.5, x)});
  const std::string mid = g.emit("Mul", {g.GO(0), slope});
  const std::string lower = g.emit("Where", {g.emit("Less", {x, g.scalar_like(-3.0, x)}), zero_like(g, x), mid});
  g.set_GI(0, g.emit("Where", {g.emit("Greater", {x, g.scalar_like(3.0, x)}), g.GO(0), lower}));
}

// y = x tanh(softplus(x)): dx = g (t + x (1 - t^2) sigmoid(x)), t = tanh(softplus(x)).
void mish_grad(GradContext& g) {
  const std::string x = g.I(0);
  const std::string t = g.emit("Tanh", {g.emit("Softplus", {x})});
  const std::string sech2 = g.emit("Sub", {g.scalar_like(1.0, x), g.emit("Mul", {t, t})});
  const std::string d = g.emit("Add", {t, g.emit("Mul", {x, g.emit("Mul", {sech2, g.emit("Sigmoid", {x})})})});
  g.set_GI(0, g.emit("Mul", {g.GO(0), d}));
}

// y = x < 0 ? slope x : x, slope broadcast to x: dx = x < 0 ? g slope : g; dslope = sum of g x
// where x < 0 (the builder sums it back to slope's shape).
void prelu_grad(GradContext& g) {
  const std::string x = g.I(0), slope = g.I(1);
  const std::string neg = g.emit("Less", {x, zero_like(g, x)});
  if (g.needs(0)) g.set_GI(0, g.emit("Where", {neg, g.emit("Mul", {g.GO(0), slope}), g.GO(0)}));
  if (g.needs(1)) g.set_GI(1, g.emit("Where", {neg, g.emit("Mul", {g.GO(0), x}), zero_like(g, x)}), Broadcast::Maybe);
}

// y = gamma (x > 0 ? x : alpha (e^x - 1)): dx = g gamma where x > 0, else g (y + gamma alpha).
void selu_grad(GradContext& g) {
  const double alpha = g.node.attr_float("alpha", 1.67326319217681884765625f);
  const double gamma = g.node.attr_float("gamma", 1.05070102214813232421875f);
  const std::string x = g.I(0);
  const std::string pos = g.emit("Greater", {x, zero_like(g, x)});
  const std::string neg = g.emit("Mul", {g.GO(0), g.emit("Add", {g.O(0), g.scalar_like(gamma * alpha, x)})});
  g.set_GI(0, g.emit("Where", {pos, g.emit("Mul", {g.GO(0), g.scalar_like(gamma, x)}), neg}));
}

// y = x -/+ bias outside [-lambd, lambd], 0 inside: dx = g outside, 0 inside.
void shrink_grad(GradContext& g) {
  const float lambd = g.node.attr_float("lambd", 0.5f);
  const std::string x = g.I(0);
  const std::string outside = g.emit("Or", {g.emit("Less", {x, g.scalar_like(-static_cast<double>(lambd), x)}),
                                            g.emit("Greater", {x, g.scalar_like(lambd, x)})});
  g.set_GI(0, g.emit("Where", {outside, g.GO(0), zero_like(g, x)}));
}

// y = x / (1 + |x|): dx = g / (1 + |x|)^2.
void softsign_grad(GradContext& g) {
  const std::string den = g.emit("Add", {g.scalar_like(1.0, g.I(0)), g.emit("Abs", {g.I(0)})});
  g.set_GI(0, g.emit("Div", {g.GO(0), g.emit("Mul", {den, den})}));
}

// y = x > alpha ? x : 0: dx = g where x > alpha.
void thresholded_relu_grad(GradContext& g) {
  const float alpha = g.node.attr_float("alpha", 1.0f);
  const std::string x = g.I(0);
  g.set_GI(0, g.emit("Where", {g.emit("Greater", {x, g.scalar_like(alpha, x)}), g.GO(0), zero_like(g, x)}));
}

const GradientRegistrar r_relu({"", "Relu", 1, kMaxOpset}, relu_grad);
const GradientRegistrar r_leaky({"", "LeakyRelu", 1, kMaxOpset}, leaky_relu_grad);
const GradientRegistrar r_sigmoid({"", "Sigmoid", 1, kMaxOpset}, sigmoid_grad);
const GradientRegistrar r_tanh({"", "Tanh", 1, kMaxOpset}, tanh_grad);
const GradientRegistrar r_softplus({"", "Softplus", 1, kMaxOpset}, softplus_grad);
const GradientRegistrar r_elu({"", "Elu", 1, kMaxOpset}, elu_grad);
const GradientRegistrar r_clip({"", "Clip", 1, kMaxOpset}, clip_grad);
const GradientRegistrar r_celu({"", "Celu", 1, kMaxOpset}, celu_grad);
const GradientRegistrar r_gelu({"", "Gelu", 1, kMaxOpset}, gelu_grad);
const GradientRegistrar r_kiln_gelu({kKilnDomain, "Gelu", 1, kMaxOpset}, gelu_grad);
const GradientRegistrar r_hard_sigmoid({"", "HardSigmoid", 1, kMaxOpset}, hard_sigmoid_grad);
const GradientRegistrar r_hard_swish({"", "HardSwish", 1, kMaxOpset}, hard_swish_grad);
const GradientRegistrar r_mish({"", "Mish", 1, kMaxOpset}, mish_grad);
const GradientRegistrar r_prelu({"", "PRelu", 1, kMaxOpset}, prelu_grad);
const GradientRegistrar r_selu({"", "Selu", 1, kMaxOpset}, selu_grad);
const GradientRegistrar r_shrink({"", "Shrink", 1, kMaxOpset}, shrink_grad);
const GradientRegistrar r_softsign({"", "Softsign", 1, kMaxOpset}, softsign_grad);
const GradientRegistrar r_thresholded_relu({"", "ThresholdedRelu", 1, kMaxOpset}, thresholded_relu_grad);

}  // namespace
}  // namespace kiln

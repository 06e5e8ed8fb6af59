// Gradient rules of MeanVarianceNormalization, LpNormalization and LRN (kernels/cpu/normalize.cpp).
// MVN and LpNormalization are rare and cheap enough in standard ops; LRN's window sum over channels
// has no standard-op form, so it gets ai.kiln.LRNGrad (kernels/cpu/normalize_grad.cpp).
#include <fmt/format.h>

#include "autodiff/registry.h"

namespace kiln {
namespace {

// A keepdims reduction over `axes`: axes are an attribute before opset 18 (ReduceSum: 13), an
// input from then on.
std::string reduce(GradContext& g, const char* op, const std::string& x, const std::vector<int64_t>& axes) {
  if (g.opset() >= (std::string(op) == "ReduceSum" ? 13 : 18))
    return g.emit(op, {x, g.constant(Tensor::from_vector<int64_t>({int64_t(axes.size())}, axes))},
                  {{"keepdims", Attribute::of_int(1)}});
  return g.emit(op, {x}, {{"axes", Attribute::of_ints(axes)}, {"keepdims", Attribute::of_int(1)}});
}

// y = d / s with d = x - mean, s = std + 1e-9 (std the population deviation over `axes`):
//   dx = (g - mean(g)) / s - mean(g * d) * d / (s^2 * std).
void mvn_grad(GradContext& g) {
  const std::vector<int64_t> axes = g.node.attr_ints("axes", {0, 2, 3});
  const std::string x = g.I(0), dy = g.GO(0);
  const std::string d = g.emit("Sub", {x, reduce(g, "ReduceMean", x, axes)});
  const std::string sd = g.emit("Sqrt", {reduce(g, "ReduceMean", g.emit("Mul", {d, d}), axes)});
  const std::string s = g.emit("Add", {sd, g.scalar_like(1e-9, x)});
  const std::string centred = g.emit("Div", {g.emit("Sub", {dy, reduce(g, "ReduceMean", dy, axes)}), s});
  const std::string gd = reduce(g, "ReduceMean", g.emit("Mul", {dy, d}), axes);
  const std::string denom = g.emit("Mul", {g.emit("Mul", {s, s}), sd});
  g.set_GI(0, g.emit("Sub", {centred, g.emit("Div", {g.emit("Mul", {gd, d}), denom})}));
}

// y = x / n along `axis`, n = ||x||_p:  p = 2: dx = (g - y * sum(g * y)) / n;
// p = 1: dx = (g - sign(x) * sum(g * y)) / n. A zero norm (the forward gave zeros) gives zeros.
void lp_norm_grad(GradContext& g) {
  const int64_t p = g.node.attr_int("p", 2), axis = g.node.attr_int("axis", -1);
  if (p != 1 && p != 2) throw InvalidModel(fmt::format("LpNormalization: p = {} must be 1 or 2", p));
  const std::string x = g.I(0), y = g.O(0), dy = g.GO(0);
  const std::string norm = reduce(g, p == 2 ? "ReduceL2" : "ReduceL1", x, {axis});
  const std::string dot = reduce(g, "ReduceSum", g.emit("Mul", {dy, y}), {axis});
  const std::string dir = p == 2 ? y : g.emit("Sign", {x});
  const std::string dx = g.emit("Div", {g.emit("Sub", {dy, g.emit("Mul", {dir, dot})}), norm});
  const std::string zero = g.scalar_like(0.0, x);
  g.set_GI(0, g.emit("Where", {g.emit("Equal", {norm, zero}), zero, dx}));
}

void lrn_grad(GradContext& g) {
  std::map<std::string, Attribute> attrs{{"size", Attribute::of_int(g.node.attr_int("size"))},
                                         {"alpha", Attribute::of_float(g.node.attr_float("alpha", 1e-4f))},
                                         {"beta", Attribute::of_float(g.node.attr_float("beta", 0.75f))},
                                         {"bias", Attribute::of_float(g.node.attr_float("bias", 1.f))}};
  g.set_GI(0, g.emit(kKilnDomain, "LRNGrad", {g.GO(0), g.I(0)}, attrs));
}

const GradientRegistrar r_mvn({"", "MeanVarianceNormalization", 1, kMaxOpset}, mvn_grad);
const GradientRegistrar r_lp_norm({"", "LpNormalization", 1, kMaxOpset}, lp_norm_grad);
const GradientRegistrar r_lrn({"", "LRN", 1, kMaxOpset}, lrn_grad);

}  // namespace
}  // namespace kiln

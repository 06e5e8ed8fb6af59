// Gradient rules of the reductions (kernels/cpu/reduce.cpp). Each writes d(input) as an elementwise
// expression of x and of the output (and its gradient) brought back to keepdims form, so numpy
// broadcasting does the spreading over the reduced axes. Axes are an attribute before opset 18 and
// an input from 18 (ReduceSum: from 13).
#include <fmt/format.h>

#include "autodiff/registry.h"

namespace kiln {
namespace {

int64_t axes_input_since(const std::string& op) { return op == "ReduceSum" ? 13 : 18; }
bool axes_are_input(GradContext& g, const std::string& op) { return g.opset() >= axes_input_since(op); }

// The axes of the forward node as a value (from its input or attribute); "" means all axes.
std::string axes_value(GradContext& g) {
  if (axes_are_input(g, g.node.op_type)) return g.has_input(1) ? g.I(1) : "";
  const auto axes = g.node.attr_ints("axes", {});
  if (axes.empty()) return "";
  return g.constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(axes.size())}, axes));
}

// With axes as an input, noop_with_empty_axes=1 and no axes input, the kernel returns its input
// unchanged: the gradient passes through. (An axes input that is present but empty at run time
// cannot be seen here; such a node is differentiated as a reduction over all axes.)
bool is_noop(GradContext& g) {
  return axes_are_input(g, g.node.op_type) && !g.has_input(1) && g.node.attr_int("noop_with_empty_axes", 0) != 0;
}

// Registers a reduction's rule behind the noop check.
GradientRule reduction(void (*rule)(GradContext&)) {
  return [rule](GradContext& g) {
    if (is_noop(g)) g.set_GI(0, g.GO(0));
    else rule(g);
  };
}

// `v` (shaped like the output) with the reduced axes put back as 1s, as keepdims=1 would leave it.
// keepdims=0 over all axes gives a scalar, which broadcasts as it is.
std::string keep(GradContext& g, const std::string& v) {
  if (g.node.attr_int("keepdims", 1) != 0) return v;
  const std::string axes = axes_value(g);
  if (axes.empty()) return v;
  if (g.opset() >= 13) return g.emit("Unsqueeze", {v, axes});
  return g.emit("Unsqueeze", {v}, {{"axes", Attribute::of_ints(g.node.attr_ints("axes", {}))}});
}

// `op` (a reduction) of `v` over the forward node's axes with keepdims=1, axes passed the way `op`
// takes them at this opset.
std::string reduce_kept(GradContext& g, const std::string& op, const std::string& v) {
  std::map<std::string, Attribute> attrs{{"keepdims", Attribute::of_int(1)}};
  if (axes_are_input(g, op)) {
    const std::string axes = axes_value(g);
    return g.emit(op, axes.empty() ? std::vector<std::string>{v} : std::vector<std::string>{v, axes}, attrs);
  }
  // Before `op` took axes as an input the forward node had them as an attribute too.
  const auto axes = g.node.attr_ints("axes", {});
  if (!axes.empty()) attrs["axes"] = Attribute::of_ints(axes);
  return g.emit(op, {v}, attrs);
}

std::string expand_like_input(GradContext& g, const std::string& v) {
  return g.emit("Expand", {v, g.emit("Shape", {g.I(0)})});
}

std::string cast_like_input(GradContext& g, const std::string& v) {
  const auto t = g.dtype(g.I(0)).value_or(DType::Float32);
  return g.emit("Cast", {v}, {{"to", Attribute::of_int(dtype_to_onnx(t))}});
}

void reduce_sum_grad(GradContext& g) { g.set_GI(0, expand_like_input(g, keep(g, g.GO(0)))); }

void reduce_mean_grad(GradContext& g) {
  // count = size(x) / size(y), in x's dtype.
  const std::string count =
      g.emit("Div", {cast_like_input(g, g.emit("Size", {g.I(0)})), cast_like_input(g, g.emit("Size", {g.O(0)}))});
  g.set_GI(0, g.emit("Div", {expand_like_input(g, keep(g, g.GO(0))), count}));
}

// y = sum x^2: dx = 2 x g.
void reduce_sum_square_grad(GradContext& g) {
  const std::string two_x = g.emit("Mul", {g.I(0), g.scalar_like(2.0, g.I(0))});
  g.set_GI(0, g.emit("Mul", {keep(g, g.GO(0)), two_x}));
}

// y = sum |x|: dx = sign(x) g (0 at x == 0, as PyTorch).
void reduce_l1_grad(GradContext& g) { g.set_GI(0, g.emit("Mul", {keep(g, g.GO(0)), g.emit("Sign", {g.I(0)})})); }

// y = sqrt(sum x^2): dx = x g / y, and 0 where y == 0 (PyTorch's norm does the same).
void reduce_l2_grad(GradContext& g) {
  const std::string y = g.O(0);
  const std::string zero = g.scalar_like(0.0, g.I(0));
  const std::string q = g.emit("Where", {g.emit("Equal", {y, zero}), zero, g.emit("Div", {g.GO(0), y})});
  g.set_GI(0, g.emit("Mul", {keep(g, q), g.I(0)}));
}

// y = log(sum x): dx = g / sum x = g / e^y.
void reduce_log_sum_grad(GradContext& g) {
  const std::string q = g.emit("Div", {g.GO(0), g.emit("Exp", {g.O(0)})});
  g.set_GI(0, expand_like_input(g, keep(g, q)));
}

// y = log(sum e^x): dx = g e^(x - y) (the softmax over the reduced axes).
void reduce_log_sum_exp_grad(GradContext& g) {
  const std::string p = g.emit("Exp", {g.emit("Sub", {g.I(0), keep(g, g.O(0))})});
  g.set_GI(0, g.emit("Mul", {keep(g, g.GO(0)), p}));
}

// ReduceMax / ReduceMin: the gradient goes to the elements equal to the result, split evenly among
// ties (as PyTorch's amax/amin).
void reduce_extremum_grad(GradContext& g) {
  const std::string mask = cast_like_input(g, g.emit("Equal", {g.I(0), keep(g, g.O(0))}));
  const std::string count = reduce_kept(g, "ReduceSum", mask);
  g.set_GI(0, g.emit("Mul", {mask, g.emit("Div", {keep(g, g.GO(0)), count})}));
}

// y = prod x: dx_i = g * (product of the other elements). Written without dividing by zero: with
// P the product of the nonzero elements and z the count of zeros, dx_i = g P / x_i when z == 0;
// when z == 1 only the zero element gets g P; when z >= 2 every dx_i is 0.
void reduce_prod_grad(GradContext& g) {
  const std::string x = g.I(0);
  const std::string zero = g.scalar_like(0.0, x), one = g.scalar_like(1.0, x);
  const std::string is_zero = g.emit("Equal", {x, zero});
  const std::string safe_x = g.emit("Where", {is_zero, one, x});
  const std::string p = reduce_kept(g, "ReduceProd", safe_x);
  const std::string zeros = reduce_kept(g, "ReduceSum", cast_like_input(g, is_zero));
  const std::string at_zero = g.emit("Where", {g.emit("Equal", {zeros, one}), p, zero});
  const std::string elsewhere = g.emit("Where", {g.emit("Equal", {zeros, zero}), g.emit("Div", {p, safe_x}), zero});
  const std::string others = g.emit("Where", {is_zero, at_zero, elsewhere});
  g.set_GI(0, g.emit("Mul", {keep(g, g.GO(0)), others}));
}

const GradientRegistrar r_sum({"", "ReduceSum", 1, kMaxOpset}, reduction(reduce_sum_grad));
const GradientRegistrar r_mean({"", "ReduceMean", 1, kMaxOpset}, reduction(reduce_mean_grad));
const GradientRegistrar r_sum_square({"", "ReduceSumSquare", 1, kMaxOpset}, reduction(reduce_sum_square_grad));
const GradientRegistrar r_l1({"", "ReduceL1", 1, kMaxOpset}, reduction(reduce_l1_grad));
const GradientRegistrar r_l2({"", "ReduceL2", 1, kMaxOpset}, reduction(reduce_l2_grad));
const GradientRegistrar r_log_sum({"", "ReduceLogSum", 1, kMaxOpset}, reduction(reduce_log_sum_grad));
const GradientRegistrar r_log_sum_exp({"", "ReduceLogSumExp", 1, kMaxOpset}, reduction(reduce_log_sum_exp_grad));
const GradientRegistrar r_max({"", "ReduceMax", 1, kMaxOpset}, reduction(reduce_extremum_grad));
const GradientRegistrar r_min({"", "ReduceMin", 1, kMaxOpset}, reduction(reduce_extremum_grad));
const GradientRegistrar r_prod({"", "ReduceProd", 1, kMaxOpset}, reduction(reduce_prod_grad));

}  // namespace
}  // namespace kiln

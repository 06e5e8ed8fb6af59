// Gradient rules of the element and tuple indexing ops (kernels/cpu/scatter.cpp).
//
// GatherElements and GatherND: the output gradient is scatter-added into zeros of the data's shape
// by ai.kiln.GatherElementsGrad and GatherNDGrad (kernels/cpu/scatter_grad.cpp), so that repeated
// indices accumulate at every opset. Indices never get a gradient.
//
// ScatterElements, its deprecated alias Scatter, and ScatterND: with reduction "none" the output is
// data with some positions overwritten by updates, so data's gradient is dY with those positions
// zeroed (a scatter of zeros) and updates' gradient is dY gathered at them. With "add" data's
// gradient is dY unchanged. Repeated indices under "none" are undefined in ONNX (the kernel lets the
// last write win); the rule then gives every repeated update the gradient of the surviving one.
// With "max" / "min" (opset 18) the gradient of a position goes to those of data and its updates
// that equal the result, split evenly among ties (torch's scatter_reduce amax / amin with
// include_self). With "mul" each factor's gradient is dY times the product of the position's other
// factors (data and its updates), computed without dividing by a zero: the product of the non-zero
// factors over the factor itself when no other factor is zero, else 0 (torch's scatter_reduce prod).
#include <fmt/format.h>

#include "autodiff/registry.h"

namespace kiln {
namespace {

std::string zeros_like(GradContext& g, const std::string& value) {
  const DType t = g.dtype(value).value_or(DType::Float32);
  return g.emit("ConstantOfShape", {g.emit("Shape", {value})},
                {{"value", Attribute::of_tensor(Tensor::zeros(t, {1}))}});
}

// op(dY, shape(data), indices) with the forward's attribute `attr`, if it has one.
void scatter_back(GradContext& g, const char* op, const char* attr) {
  std::map<std::string, Attribute> attrs;
  if (g.node.has_attr(attr)) attrs[attr] = Attribute::of_int(g.node.attr_int(attr));
  g.set_GI(0, g.emit(kKilnDomain, op, {g.GO(0), g.emit("Shape", {g.I(0)}), g.I(1)}, attrs));
}

void gather_elements_grad(GradContext& g) { scatter_back(g, "GatherElementsGrad", "axis"); }
void gather_nd_grad(GradContext& g) { scatter_back(g, "GatherNDGrad", "batch_dims"); }

// max / min: dY shared among data and the updates that equal the result at each position.
void extremum_grad(GradContext& g, const std::string& scatter, const std::string& gather,
                   const std::map<std::string, Attribute>& axis) {
  const DType t = g.dtype(g.I(0)).value_or(DType::Float32);
  const auto as_float = [&](const std::string& v) {
    return g.emit("Cast", {v}, {{"to", Attribute::of_int(dtype_to_onnx(t))}});
  };
  const std::string kept = as_float(g.emit("Equal", {g.I(0), g.O(0)}));
  const std::string won = as_float(g.emit("Equal", {g.I(2), g.emit(gather, {g.O(0), g.I(1)}, axis)}));
  std::map<std::string, Attribute> add = axis;
  add["reduction"] = Attribute::of_string("add");
  const std::string ties = g.emit("Add", {kept, g.emit(scatter, {zeros_like(g, g.I(0)), g.I(1), won}, add)});
  const std::string share = g.emit("Div", {g.GO(0), ties});
  if (g.needs(0)) g.set_GI(0, g.emit("Mul", {share, kept}));
  if (g.needs(2)) g.set_GI(2, g.emit("Mul", {g.emit(gather, {share, g.I(1)}, axis), won}));
}

// mul: dY times the product of the other factors at each position (see above).
void product_grad(GradContext& g, const std::string& scatter, const std::string& gather,
                  const std::map<std::string, Attribute>& axis) {
  const DType t = g.dtype(g.I(0)).value_or(DType::Float32);
  const auto as_float = [&](const std::string& v) {
    return g.emit("Cast", {v}, {{"to", Attribute::of_int(dtype_to_onnx(t))}});
  };
  const std::string zero = g.scalar_like(0.0, g.I(0)), one = g.scalar_like(1.0, g.I(0));
  const std::string d_zero = g.emit("Equal", {g.I(0), zero}), u_zero = g.emit("Equal", {g.I(2), zero});
  const std::string d_nz = g.emit("Where", {d_zero, one, g.I(0)}), u_nz = g.emit("Where", {u_zero, one, g.I(2)});
  std::map<std::string, Attribute> add = axis, mul = axis;
  add["reduction"] = Attribute::of_string("add");
  mul["reduction"] = Attribute::of_string("mul");
  const std::string ones = g.emit("Add", {zeros_like(g, g.I(0)), one});
  // Per position: how many factors are zero, and the product of the non-zero ones.
  const std::string zeros =
      g.emit("Add", {as_float(d_zero), g.emit(scatter, {zeros_like(g, g.I(0)), g.I(1), as_float(u_zero)}, add)});
  const std::string product = g.emit("Mul", {d_nz, g.emit(scatter, {ones, g.I(1), u_nz}, mul)});
  // The others' product of a factor f: product / nz(f) when no other factor is zero, else 0.
  const auto others = [&](const std::string& zeros_here, const std::string& f_zero, const std::string& product_here,
                          const std::string& f_nz) {
    const std::string other_zeros = g.emit("Sub", {zeros_here, as_float(f_zero)});
    return g.emit("Where", {g.emit("Equal", {other_zeros, zero}), g.emit("Div", {product_here, f_nz}), zero});
  };
  if (g.needs(0)) g.set_GI(0, g.emit("Mul", {g.GO(0), others(zeros, d_zero, product, d_nz)}));
  if (g.needs(2)) {
    const auto at = [&](const std::string& v) { return g.emit(gather, {v, g.I(1)}, axis); };
    g.set_GI(2, g.emit("Mul", {at(g.GO(0)), others(at(zeros), u_zero, at(product), u_nz)}));
  }
}

// scatter: the forward op that writes zeros into dY; gather: the op reading dY at the indices.
void scatter_grad(GradContext& g, const std::string& scatter, const std::string& gather) {
  const std::string reduction = g.node.attr_string("reduction", "none");
  std::map<std::string, Attribute> axis;
  if (g.node.has_attr("axis")) axis["axis"] = Attribute::of_int(g.node.attr_int("axis"));
  if (reduction == "max" || reduction == "min") return extremum_grad(g, scatter, gather, axis);
  if (reduction == "mul") return product_grad(g, scatter, gather, axis);
  if (reduction != "none" && reduction != "add")
    throw Unsupported(fmt::format("gradient of {} with reduction '{}' is not implemented (none, add, mul, max, min)",
                                  g.node.op_type, reduction));
  if (g.needs(0)) {
    if (reduction == "add") g.set_GI(0, g.GO(0));
    else g.set_GI(0, g.emit(scatter, {g.GO(0), g.I(1), zeros_like(g, g.I(2))}, axis));
  }
  if (g.needs(2)) {
    if (g.opset() < 11)
      throw Unsupported(fmt::format("gradient of {}'s updates at opset {} needs GatherElements (opset 11)",
                                    g.node.op_type, g.opset()));
    g.set_GI(2, g.emit(gather, {g.GO(0), g.I(1)}, axis));
  }
}

void scatter_elements_grad(GradContext& g) { scatter_grad(g, g.node.op_type, "GatherElements"); }
void scatter_nd_grad(GradContext& g) { scatter_grad(g, "ScatterND", "GatherND"); }

const GradientRegistrar r_gather_elements({"", "GatherElements", 1, kMaxOpset}, gather_elements_grad);
const GradientRegistrar r_gather_nd({"", "GatherND", 1, kMaxOpset}, gather_nd_grad);
const GradientRegistrar r_scatter_elements({"", "ScatterElements", 1, kMaxOpset}, scatter_elements_grad);
const GradientRegistrar r_scatter({"", "Scatter", 1, kMaxOpset}, scatter_elements_grad);
const GradientRegistrar r_scatter_nd({"", "ScatterND", 1, kMaxOpset}, scatter_nd_grad);

}  // namespace
}  // namespace kiln

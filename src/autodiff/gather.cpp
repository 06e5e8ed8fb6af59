// Gradient rules of Gather (kernels/cpu/gather.cpp) and of GatherElements and GatherND
// (kernels/cpu/scatter.cpp): the output gradient is scatter-added into zeros of the data's shape by
// ai.kiln ops (so that repeated indices accumulate at every opset, unlike ScatterElements' "add",
// which needs opset 16). Indices are integers and never get a gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

// op(dY, shape(data), indices) with the forward's attribute `attr`, if it has one.
void scatter_back(GradContext& g, const char* op, const char* attr) {
  std::map<std::string, Attribute> attrs;
  if (g.node.has_attr(attr)) attrs[attr] = Attribute::of_int(g.node.attr_int(attr));
  g.set_GI(0, g.emit(kKilnDomain, op, {g.GO(0), g.emit("Shape", {g.I(0)}), g.I(1)}, attrs));
}

void gather_grad(GradContext& g) { scatter_back(g, "GatherGrad", "axis"); }
void gather_elements_grad(GradContext& g) { scatter_back(g, "GatherElementsGrad", "axis"); }
void gather_nd_grad(GradContext& g) { scatter_back(g, "GatherNDGrad", "batch_dims"); }

const GradientRegistrar r_gather({"", "Gather"}, gather_grad);
const GradientRegistrar r_gather_elements({"", "GatherElements"}, gather_elements_grad);
const GradientRegistrar r_gather_nd({"", "GatherND"}, gather_nd_grad);

}  // namespace
}  // namespace kiln

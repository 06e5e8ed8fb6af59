// Gradient rule of Gather (kernels/cpu/gather.cpp): the output gradient is scatter-added into zeros
// of the data's shape by ai.kiln.GatherGrad (kernels/cpu/gather_grad.cpp), so that repeated indices
// accumulate at every opset (unlike ScatterElements' "add", which needs opset 16). The indices are
// integers and never get a gradient. GatherElements and GatherND are in the scatter family.
#include "autodiff/registry.h"

namespace kiln {
namespace {

// GatherGrad(dY, shape(data), indices) with the forward's axis, if it has one.
void gather_grad(GradContext& g) {
  std::map<std::string, Attribute> attrs;
  if (g.node.has_attr("axis")) attrs["axis"] = Attribute::of_int(g.node.attr_int("axis"));
  g.set_GI(0, g.emit(kKilnDomain, "GatherGrad", {g.GO(0), g.emit("Shape", {g.I(0)}), g.I(1)}, attrs));
}

const GradientRegistrar r_gather({"", "Gather", 1, kMaxOpset}, gather_grad);

}  // namespace
}  // namespace kiln

// Gradient rules of the shape ops (kernels/cpu/shape.cpp): views pass the gradient back reshaped.
// Shape and Size carry no gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void reshape_back(GradContext& g) { g.set_GI(0, g.emit("Reshape", {g.GO(0), g.emit("Shape", {g.I(0)})})); }
void identity_grad(GradContext& g) { g.set_GI(0, g.GO(0)); }

const GradientRegistrar r_reshape({"", "Reshape"}, reshape_back);
const GradientRegistrar r_flatten({"", "Flatten"}, reshape_back);
const GradientRegistrar r_squeeze({"", "Squeeze"}, reshape_back);
const GradientRegistrar r_unsqueeze({"", "Unsqueeze"}, reshape_back);
const GradientRegistrar r_identity({"", "Identity"}, identity_grad);
const NoGradient none({{"", "Shape"}, {"", "Size"}});

}  // namespace
}  // namespace kiln

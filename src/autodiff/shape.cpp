// Gradient rules of the shape ops (kernels/cpu/shape.cpp): views pass the gradient back reshaped.
// Shape and Size carry no gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void reshape_back(GradContext& g) { g.set_GI(0, g.emit("Reshape", {g.GO(0), g.emit("Shape", {g.I(0)})})); }
void identity_grad(GradContext& g) { g.set_GI(0, g.GO(0)); }

const GradientRegistrar r_reshape({"", "Reshape", 1, kMaxOpset}, reshape_back);
const GradientRegistrar r_flatten({"", "Flatten", 1, kMaxOpset}, reshape_back);
const GradientRegistrar r_squeeze({"", "Squeeze", 1, kMaxOpset}, reshape_back);
const GradientRegistrar r_unsqueeze({"", "Unsqueeze", 1, kMaxOpset}, reshape_back);
const GradientRegistrar r_identity({"", "Identity", 1, kMaxOpset}, identity_grad);
const NoGradient none({{"", "Shape", 1, kMaxOpset}, {"", "Size", 1, kMaxOpset}});

}  // namespace
}  // namespace kiln

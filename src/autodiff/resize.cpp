// Gradient rule of Resize (kernels/cpu/resize.cpp): ai.kiln.ResizeGrad (kernels/cpu/resize_grad.cpp) runs the
// transposed interpolation, for every mode and coordinate transformation the forward supports. roi, scales and sizes
// only shape the map and get no gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void resize_grad(GradContext& g) {
  std::vector<std::string> in{g.GO(0), g.emit("Shape", {g.I(0)})};
  for (size_t k = 1; k < 4; ++k) in.push_back(g.has_input(k) ? g.I(k) : "");
  while (in.back().empty()) in.pop_back();
  g.set_GI(0, g.emit(kKilnDomain, "ResizeGrad", in, g.node.attrs));
}

const GradientRegistrar r_resize({"", "Resize", 11, kMaxOpset}, resize_grad);

}  // namespace
}  // namespace kiln

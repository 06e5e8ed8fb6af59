// The gradient rule of RoiAlign (kernels/cpu/roi_align.cpp): ai.kiln.RoiAlignGrad
// (kernels/cpu/roi_align_grad.cpp) gives X its gradient; the regions and batch indices get none.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void roi_align_grad(GradContext& g) {
  if (!g.needs(0)) return;
  std::map<std::string, Attribute> attrs = g.node.attrs;
  // The gradient op reads the mode its forward ran at: opsets 10-15 meant output_half_pixel.
  if (!attrs.count("coordinate_transformation_mode"))
    attrs["coordinate_transformation_mode"] =
        Attribute::of_string(g.opset() >= 16 ? "half_pixel" : "output_half_pixel");
  g.set_GI(0, g.emit(kKilnDomain, "RoiAlignGrad", {g.GO_or_zeros(0), g.I(0), g.I(1), g.I(2)}, attrs));
}

const GradientRegistrar r_roi_align({"", "RoiAlign", 10, kMaxOpset}, roi_align_grad);

}  // namespace
}  // namespace kiln

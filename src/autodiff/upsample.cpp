// Gradient rule of Upsample (opsets 7-9) and Resize-10 (kernels/cpu/upsample.cpp): Resize's
// ai.kiln.ResizeGrad (kernels/cpu/resize_grad.cpp) with the asymmetric coordinates and floor
// rounding those ops mean; the scales get no gradient.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void legacy_resize_grad(GradContext& g) {
  if (!g.needs(0)) return;
  std::string scales;
  if (g.node.op_type == "Upsample" && g.opset() < 9) {
    const std::vector<float> s = g.node.attr_floats("scales", {});
    scales = g.constant(Tensor::from_vector<float>({int64_t(s.size())}, s));
  } else {
    scales = g.I(1);
  }
  const std::string mode = g.node.attr_string("mode", "nearest");
  const std::map<std::string, Attribute> attrs{{"mode", Attribute::of_string(mode == "nearest" ? "nearest" : "linear")},
                                               {"coordinate_transformation_mode", Attribute::of_string("asymmetric")},
                                               {"nearest_mode", Attribute::of_string("floor")}};
  g.set_GI(0, g.emit(kKilnDomain, "ResizeGrad", {g.GO_or_zeros(0), g.emit("Shape", {g.I(0)}), "", scales}, attrs));
}

const GradientRegistrar r_upsample({"", "Upsample", 7, 9}, legacy_resize_grad);
const GradientRegistrar r_resize10({"", "Resize", 10, 10}, legacy_resize_grad);

}  // namespace
}  // namespace kiln

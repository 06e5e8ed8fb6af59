// Gradient rule of Compress (kernels/cpu/compress.cpp): Compress is a Gather of the condition's
// true positions, so the output gradient goes back through ai.kiln.GatherGrad (zeros elsewhere);
// without an axis over the flattened input, reshaped to the input's shape. The condition gets none.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void compress_grad(GradContext& g) {
  const std::string minus_one = g.constant(Tensor::from_vector<int64_t>({1}, {-1}));
  const std::string positions = g.emit("Reshape", {g.emit("NonZero", {g.I(1)}), minus_one});  // [1, K] -> [K]
  if (g.node.has_attr("axis")) {
    const std::map<std::string, Attribute> attrs{{"axis", Attribute::of_int(g.node.attr_int("axis"))}};
    g.set_GI(0, g.emit(kKilnDomain, "GatherGrad", {g.GO(0), g.emit("Shape", {g.I(0)}), positions}, attrs));
    return;
  }
  const std::string flat = g.emit("Reshape", {g.emit("Size", {g.I(0)}), minus_one});  // [numel]
  const std::string d_flat = g.emit(kKilnDomain, "GatherGrad", {g.GO(0), flat, positions}, {});
  g.set_GI(0, g.emit("Reshape", {d_flat, g.emit("Shape", {g.I(0)})}));
}

const GradientRegistrar r_compress({"", "Compress", 9, kMaxOpset}, compress_grad);

}  // namespace
}  // namespace kiln

// Gradient rules of Cast and CastLike (kernels/cpu/cast.cpp).
#include "autodiff/registry.h"

namespace kiln {
namespace {

// Casting between float types passes the gradient back in the input's dtype.
void cast_grad(GradContext& g) {
  const auto t = g.dtype(g.I(0));
  if (!t) return;
  g.set_GI(0, g.emit("Cast", {g.GO(0)}, {{"to", Attribute::of_int(dtype_to_onnx(*t))}}));
}

const GradientRegistrar r_cast({"", "Cast", 1, kMaxOpset}, cast_grad);
const GradientRegistrar r_castlike({"", "CastLike", 1, kMaxOpset}, cast_grad);

}  // namespace
}  // namespace kiln

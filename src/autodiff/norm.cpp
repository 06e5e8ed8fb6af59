// Gradient rules of BatchNormalization and InstanceNormalization (kernels/cpu/norm.cpp), through
// ai.kiln.BatchNormalizationGrad and ai.kiln.InstanceNormalizationGrad (kernels/cpu/norm_grad.cpp):
// the backward of a normalisation needs two reductions and one elementwise pass, which a chain of
// standard ops would spread over a dozen full-size temporaries.
#include <fmt/format.h>

#include "autodiff/registry.h"

namespace kiln {
namespace {

std::vector<std::string> trim(std::vector<std::string> v) {
  while (!v.empty() && v.back().empty()) v.pop_back();
  return v;
}

// `grad` in the dtype of `like` (opset 15 lets scale and the statistics have different dtypes).
std::string cast_like(GradContext& g, const std::string& grad, const std::string& from, const std::string& like) {
  const auto a = g.dtype(from), b = g.dtype(like);
  if (!a || !b || *a == *b) return grad;
  return g.emit("Cast", {grad}, {{"to", Attribute::of_int(static_cast<int64_t>(dtype_to_onnx(*b)))}});
}

// Training mode (opset 14+): Y depends on X through the batch statistics; running_mean and
// running_var depend on X and on input_mean / input_var. Inference: y = scale * (x - mean) * inv + B
// with inv = 1 / sqrt(var + epsilon) of the running statistics.
void batch_norm_grad(GradContext& g) {
  const bool training = g.node.attr_int("training_mode", 0) != 0;
  const float eps = g.node.attr_float("epsilon", 1e-5f), momentum = g.node.attr_float("momentum", 0.9f);
  std::map<std::string, Attribute> attrs{{"epsilon", Attribute::of_float(eps)},
                                         {"momentum", Attribute::of_float(momentum)},
                                         {"training_mode", Attribute::of_int(training ? 1 : 0)}};
  if (training) {
    const std::string drm = g.GO(1), drv = g.GO(2);
    const auto outs = g.emit_multi(kKilnDomain, "BatchNormalizationGrad",
                                   trim({g.GO_or_zeros(0), g.I(0), g.I(1), "", "", drm, drv}), 3, attrs);
    if (!g.GO(0).empty() || !drm.empty() || !drv.empty()) g.set_GI(0, outs[0]);
    if (!g.GO(0).empty()) {
      g.set_GI(1, outs[1]);
      g.set_GI(2, outs[2]);
    }
    if (!drm.empty()) g.set_GI(3, g.emit("Mul", {drm, g.scalar_like(momentum, g.O(1))}));
    if (!drv.empty()) g.set_GI(4, g.emit("Mul", {drv, g.scalar_like(momentum, g.O(2))}));
    return;
  }
  const std::string var = g.I(4);
  const std::string inv = g.emit("Reciprocal", {g.emit("Sqrt", {g.emit("Add", {var, g.scalar_like(eps, var)})})});
  const auto outs =
      g.emit_multi(kKilnDomain, "BatchNormalizationGrad", {g.GO(0), g.I(0), g.I(1), g.I(3), inv}, 3, attrs);
  g.set_GI(0, outs[0]);
  g.set_GI(1, outs[1]);
  g.set_GI(2, outs[2]);
  // The running statistics are buffers, rarely differentiated; when asked: dmean = -dB * scale * inv,
  // dvar = -scale * dScale * inv^2 / 2.
  if (g.needs(3) || g.needs(4)) {
    const std::string scale = cast_like(g, g.I(1), g.I(1), var);
    const std::string db = cast_like(g, outs[2], g.I(1), var), ds = cast_like(g, outs[1], g.I(1), var);
    g.set_GI(3, g.emit("Neg", {g.emit("Mul", {g.emit("Mul", {db, scale}), inv})}));
    g.set_GI(4, g.emit("Mul", {g.emit("Mul", {g.emit("Mul", {ds, scale}), g.emit("Mul", {inv, inv})}),
                               g.scalar_like(-0.5, var)}));
  }
}

void instance_norm_grad(GradContext& g) {
  const auto outs = g.emit_multi(kKilnDomain, "InstanceNormalizationGrad", {g.GO(0), g.I(0), g.I(1)}, 3,
                                 {{"epsilon", Attribute::of_float(g.node.attr_float("epsilon", 1e-5f))}});
  g.set_GI(0, outs[0]);
  g.set_GI(1, outs[1]);
  g.set_GI(2, outs[2]);
}

const GradientRegistrar r_batch_norm({"", "BatchNormalization", 1, kMaxOpset}, batch_norm_grad);
const GradientRegistrar r_instance_norm({"", "InstanceNormalization", 1, kMaxOpset}, instance_norm_grad);

}  // namespace
}  // namespace kiln

// The gradient rule of MaxUnpool (kernels/cpu/max_unpool.cpp): X[j] lands at the position I[j]
// names in the default unpooled shape, so dX[j] = that element of dY: a Gather of the flattened dY
// at I. With output_shape, dY is first cut back to the default shape (positions keep their
// coordinates): ends = Shape(X) * [1, 1, strides] + [0, 0, kernel - stride - pad_begin - pad_end].
#include <fmt/format.h>

#include "autodiff/registry.h"

namespace kiln {
namespace {

void max_unpool_grad(GradContext& g) {
  if (!g.needs(0)) return;
  std::string dy = g.GO_or_zeros(0);
  if (g.has_input(2)) {
    const std::optional<int64_t> rank = g.rank(g.I(0));
    if (!rank)
      throw Unsupported(
          fmt::format("MaxUnpool gradient: the rank of X '{}' is unknown{}", g.I(0), g.unknown_rank_reason()));
    const size_t nsp = size_t(*rank) - 2;
    const std::vector<int64_t> k = g.node.attr_ints("kernel_shape");
    const std::vector<int64_t> s = g.node.attr_ints("strides", std::vector<int64_t>(nsp, 1));
    const std::vector<int64_t> p = g.node.attr_ints("pads", std::vector<int64_t>(2 * nsp, 0));
    std::vector<int64_t> scale{1, 1}, shift{0, 0};
    for (size_t i = 0; i < nsp && i < k.size() && i < s.size() && i + nsp < p.size(); ++i) {
      scale.push_back(s[i]);
      shift.push_back(k[i] - s[i] - p[i] - p[i + nsp]);
    }
    const int64_t r = static_cast<int64_t>(scale.size());
    const std::string ends =
        g.emit("Add", {g.emit("Mul", {g.emit("Shape", {g.I(0)}), g.constant(Tensor::from_vector<int64_t>({r}, scale))}),
                       g.constant(Tensor::from_vector<int64_t>({r}, shift))});
    dy = g.emit("Slice", {dy, g.constant(Tensor::zeros(DType::Int64, {r})), ends});
  }
  const std::string flat = g.emit("Reshape", {dy, g.constant(Tensor::from_vector<int64_t>({1}, {-1}))});
  g.set_GI(0, g.emit("Gather", {flat, g.I(1)}, {{"axis", Attribute::of_int(0)}}));
}

const GradientRegistrar r_max_unpool({"", "MaxUnpool", 9, kMaxOpset}, max_unpool_grad);

}  // namespace
}  // namespace kiln

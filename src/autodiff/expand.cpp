// Gradient rules of Expand, Tile, Pad, DepthToSpace and SpaceToDepth (kernels/cpu/expand.cpp).
// Expand and Tile sum the copies back (Expand through the builder's ai.kiln.SumToShapeOf); Pad adds
// each output element to the input element it was copied from (ai.kiln.PadGrad); both kernels are
// in kernels/cpu/expand_grad.cpp. DepthToSpace and SpaceToDepth are permutations, so their gradient
// is the inverse permutation.
#include <fmt/format.h>

#include "autodiff/registry.h"

namespace kiln {
namespace {

std::string ints(GradContext& g, const std::vector<int64_t>& v) {
  return g.constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
}

// Expand broadcasts: the builder sums the gradient back to the input's shape.
void expand_grad(GradContext& g) { g.set_GI(0, g.GO(0), Broadcast::Maybe); }

// Tile: output dim d of size r_d * n_d is laid out as [r_d, n_d]; reshape the gradient to
// [r_0, n_0, r_1, n_1, ...] (at run time) and sum over the repeat dims.
void tile_grad(GradContext& g) {
  const auto rank = g.rank(g.I(0));
  if (!rank) throw Unsupported(fmt::format("Tile gradient needs the rank of '{}'{}", g.I(0), g.unknown_rank_reason()));
  if (*rank == 0) {
    g.set_GI(0, g.GO(0));
    return;
  }
  const bool axes_as_input = g.opset() >= 13;
  auto unsqueeze_last = [&](const std::string& v) {
    if (axes_as_input) return g.emit("Unsqueeze", {v, ints(g, {1})});
    return g.emit("Unsqueeze", {v}, {{"axes", Attribute::of_ints({1})}});
  };
  const std::string pairs = g.emit("Concat", {unsqueeze_last(g.I(1)), unsqueeze_last(g.emit("Shape", {g.I(0)}))},
                                   {{"axis", Attribute::of_int(1)}});
  const std::string view = g.emit("Reshape", {g.GO(0), g.emit("Reshape", {pairs, ints(g, {-1})})});
  std::vector<int64_t> repeat_axes;
  for (int64_t d = 0; d < *rank; ++d) repeat_axes.push_back(2 * d);
  std::map<std::string, Attribute> attrs{{"keepdims", Attribute::of_int(0)}};
  if (axes_as_input) {
    g.set_GI(0, g.emit("ReduceSum", {view, ints(g, repeat_axes)}, attrs));
  } else {
    attrs["axes"] = Attribute::of_ints(repeat_axes);
    g.set_GI(0, g.emit("ReduceSum", {view}, attrs));
  }
}

// Pad: ai.kiln.PadGrad for the data. The constant fills every output element that copies no
// input element, so its gradient is sum(dY) - sum(dX).
void pad_grad(GradContext& g) {
  const std::string mode = g.node.attr_string("mode", "constant");
  std::vector<std::string> in{g.GO(0), g.emit("Shape", {g.I(0)})};
  if (g.opset() >= 11) {
    in.push_back(g.I(1));
    if (g.opset() >= 18 && g.has_input(3)) in.push_back(g.I(3));
  } else {
    in.push_back(ints(g, g.node.attr_ints("pads")));
  }
  const std::string dx = g.emit(kKilnDomain, "PadGrad", in, {{"mode", Attribute::of_string(mode)}});
  g.set_GI(0, dx);
  if (g.opset() >= 11 && g.needs(2) && mode == "constant") {
    auto total = [&](const std::string& v) { return g.emit("ReduceSum", {v}, {{"keepdims", Attribute::of_int(0)}}); };
    const std::string filled = g.emit("Sub", {total(g.GO(0)), total(dx)});
    g.set_GI(2, g.emit("Reshape", {filled, g.emit("Shape", {g.I(2)})}));
  }
}

// SpaceToDepth is the inverse of DepthToSpace in DCR mode.
void depth_to_space_grad(GradContext& g) {
  const int64_t b = g.node.attr_int("blocksize");
  const std::string mode = g.opset() >= 11 ? g.node.attr_string("mode", "DCR") : "DCR";
  if (mode == "DCR") {
    g.set_GI(0, g.emit("SpaceToDepth", {g.GO(0)}, {{"blocksize", Attribute::of_int(b)}}));
    return;
  }
  // CRD: the forward reads X [N, C, b, b, H, W] as [N, C, H, b, W, b]; undo that on dY.
  const std::string sx = g.emit("Shape", {g.I(0)});
  auto dim = [&](int64_t d) { return g.emit("Gather", {sx, ints(g, {d})}); };
  const std::string target =
      g.emit("Concat", {ints(g, {0, 0}), dim(2), ints(g, {b}), dim(3), ints(g, {b})}, {{"axis", Attribute::of_int(0)}});
  const std::string blocks =
      g.emit("Transpose", {g.emit("Reshape", {g.GO(0), target})}, {{"perm", Attribute::of_ints({0, 1, 3, 5, 2, 4})}});
  g.set_GI(0, g.emit("Reshape", {blocks, sx}));
}

void space_to_depth_grad(GradContext& g) {
  std::map<std::string, Attribute> attrs{{"blocksize", Attribute::of_int(g.node.attr_int("blocksize"))}};
  if (g.opset() >= 11) attrs["mode"] = Attribute::of_string("DCR");
  g.set_GI(0, g.emit("DepthToSpace", {g.GO(0)}, attrs));
}

const GradientRegistrar r_expand({"", "Expand", 1, kMaxOpset}, expand_grad);
const GradientRegistrar r_tile({"", "Tile", 1, kMaxOpset}, tile_grad);
const GradientRegistrar r_pad({"", "Pad", 1, kMaxOpset}, pad_grad);
const GradientRegistrar r_depth_to_space({"", "DepthToSpace", 1, kMaxOpset}, depth_to_space_grad);
const GradientRegistrar r_space_to_depth({"", "SpaceToDepth", 1, kMaxOpset}, space_to_depth_grad);

}  // namespace
}  // namespace kiln

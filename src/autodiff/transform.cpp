// Gradient rules of Transpose, Concat, Split and Slice (kernels/cpu/transform.cpp); Slice's goes
// through ai.kiln.SliceGrad (kernels/cpu/transform_grad.cpp).
#include <fmt/format.h>

#include <numeric>

#include "autodiff/registry.h"

namespace kiln {
namespace {

void transpose_grad(GradContext& g) {
  std::vector<int64_t> perm = g.node.attr_ints("perm", {});
  if (perm.empty()) {
    const auto r = g.rank(g.I(0));
    if (!r)
      throw Unsupported(fmt::format("Transpose gradient needs the rank of '{}'{}", g.I(0), g.unknown_rank_reason()));
    perm.resize(static_cast<size_t>(*r));
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  std::vector<int64_t> inverse(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) inverse[static_cast<size_t>(perm[k])] = static_cast<int64_t>(k);
  g.set_GI(0, g.emit("Transpose", {g.GO(0)}, {{"perm", Attribute::of_ints(inverse)}}));
}

// Concat: split the gradient back along the axis at the inputs' (run-time) sizes.
void concat_grad(GradContext& g) {
  const int64_t axis = g.node.attr_int("axis");
  std::vector<std::string> sizes;
  const std::string axis_index = g.constant(Tensor::from_vector<int64_t>({1}, {axis}));
  for (size_t k = 0; k < g.num_inputs(); ++k)
    sizes.push_back(g.emit("Gather", {g.emit("Shape", {g.I(k)}), axis_index}));
  const std::string split = g.emit("Concat", sizes, {{"axis", Attribute::of_int(0)}});
  const auto parts = g.emit_multi("", "Split", {g.GO(0), split}, g.num_inputs(), {{"axis", Attribute::of_int(axis)}});
  for (size_t k = 0; k < g.num_inputs(); ++k) g.set_GI(k, parts[k]);
}

// Split: concatenate the outputs' gradients (zeros where none flows).
void split_grad(GradContext& g) {
  std::vector<std::string> parts;
  for (size_t k = 0; k < g.num_outputs(); ++k) parts.push_back(g.GO_or_zeros(k));
  g.set_GI(0, g.emit("Concat", parts, {{"axis", Attribute::of_int(g.node.attr_int("axis", 0))}}));
}

// Slice: dY written into zeros at the sliced positions (ai.kiln.SliceGrad, any steps).
void slice_grad(GradContext& g) {
  std::vector<std::string> in{g.GO(0), g.emit("Shape", {g.I(0)})};
  if (g.opset() >= 10) {
    for (size_t k = 1; k < 5; ++k) in.push_back(g.has_input(k) ? g.I(k) : "");
  } else {  // starts, ends and axes were attributes
    for (const char* name : {"starts", "ends", "axes"}) {
      if (!g.node.has_attr(name)) {
        in.push_back("");
        continue;
      }
      const std::vector<int64_t> v = g.node.attr_ints(name);
      in.push_back(g.constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v)));
    }
  }
  while (in.back().empty()) in.pop_back();
  g.set_GI(0, g.emit(kKilnDomain, "SliceGrad", in));
}

const GradientRegistrar r_transpose({"", "Transpose", 1, kMaxOpset}, transpose_grad);
const GradientRegistrar r_concat({"", "Concat", 1, kMaxOpset}, concat_grad);
const GradientRegistrar r_split({"", "Split", 1, kMaxOpset}, split_grad);
const GradientRegistrar r_slice({"", "Slice", 1, kMaxOpset}, slice_grad);

}  // namespace
}  // namespace kiln

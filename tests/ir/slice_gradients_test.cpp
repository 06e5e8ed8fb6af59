// join_slice_gradients (ir/fusion.h): the backward of a tensor split into Slices that partition an
// axis is one Concat of the parts' gradients in a Session, with the unfused graph's gradients
// (bit for bit: the same values, placed rather than summed with zeros); bounds computed at run
// time, or constant ones that overlap or leave part of the axis out, make one
// ai.kiln.SliceGradSum, also bit for bit the unfused Sum.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "graph_builder.h"
#include "ir/fusion.h"
#include "kiln/autodiff.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"

namespace kiln {
namespace {

// h = x W, [3, 12], cut on axis 1 at `bounds` (an end of 12 written INT64_MAX when `to_the_end`);
// loss = sum over the parts of part k scaled by k + 1 and squared, so each part's gradient differs.
// `computed`: each bound v computed at run time as torch exports chunk's, from the axis's extent
// m = 12 / 3: (v / 4) * m + v % 4.
Model split_model(const std::vector<std::pair<int64_t, int64_t>>& bounds, bool to_the_end, bool computed = false) {
  GraphBuilder b("split", 3);
  const std::string x = b.input("x", DType::Float32, {3, 4});
  const std::string h = b.op("MatMul", {x, b.normal("w", {4, 12}, 2)});
  const std::string axis = b.ints("axis", {1});
  const std::string extent = b.op("Slice", {b.op("Shape", {h}), b.ints("one", {1}), b.ints("two", {2})});
  const std::string chunk = b.op("Div", {extent, b.ints("three", {3})});
  auto bound = [&](int64_t v, const std::string& name) {
    if (!computed) return b.ints(name, {v});
    return b.op("Add", {b.op("Mul", {chunk, b.ints(name + "_chunks", {v / 4})}), b.ints(name + "_rest", {v % 4})});
  };
  std::string total;
  for (size_t k = 0; k < bounds.size(); ++k) {
    const int64_t end = to_the_end && bounds[k].second == 12 ? std::numeric_limits<int64_t>::max() : bounds[k].second;
    const std::string part = b.op("Slice", {h, bound(bounds[k].first, "start" + std::to_string(k)),
                                            end == bounds[k].second ? bound(end, "end" + std::to_string(k))
                                                                    : b.ints("end" + std::to_string(k), {end}),
                                            axis});
    const std::string scaled =
        b.op("Mul", {part, b.initializer("scale" + std::to_string(k), Tensor::scalar<float>(float(k + 1)))});
    const std::string s = b.op("ReduceSum", {b.op("Mul", {scaled, scaled})}, {{"keepdims", Attribute::of_int(0)}});
    total = total.empty() ? s : b.op("Add", {total, s});
  }
  b.output(total, "loss", DType::Float32, {});
  Model m = b.build();
  infer_shapes(m);
  return m;
}

std::map<std::string, Tensor> feeds() {
  Tensor x = Tensor::empty(DType::Float32, {3, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  return {{"x", x}};
}

TEST(JoinSliceGradients, SlicesThatPartitionAnAxisConcatTheirGradients) {
  for (bool to_the_end : {false, true}) {
    const GradientGraph grads =
        build_gradient_graph(split_model({{0, 4}, {8, 12}, {4, 8}}, to_the_end), {.loss = "loss"});
    ASSERT_EQ(count(grads.model, "SliceGrad"), 3u);
    Session fused(grads.model);
    EXPECT_EQ(count(fused.model(), "SliceGrad"), 0u) << "to the end " << to_the_end;
    EXPECT_EQ(count(fused.model(), "Concat"), 1u);
    Session plain(grads.model, {.fuse = false});
    const Tensor a = fused.run(feeds()).at(grads.grads.at("w"));
    const Tensor b = plain.run(feeds()).at(grads.grads.at("w"));
    ASSERT_EQ(a.shape(), b.shape());
    for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.data<float>()[i], b.data<float>()[i]) << i;
  }
}

// Bounds computed at run time (nn.MultiheadAttention's chunk of its packed projection), which may
// also overlap or leave part of the axis out: one ai.kiln.SliceGradSum, bit for bit the Sum of the
// SliceGrads.
TEST(JoinSliceGradients, ComputedBoundsSumTheirPartsInOneNode) {
  for (const auto& bounds : {std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {8, 12}, {4, 8}},
                             std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {4, 8}, {8, 11}}}) {
    const GradientGraph grads = build_gradient_graph(split_model(bounds, false, true), {.loss = "loss"});
    ASSERT_EQ(count(grads.model, "SliceGrad"), 3u);
    Session fused(grads.model);
    EXPECT_EQ(count(fused.model(), "SliceGrad"), 0u);
    EXPECT_EQ(count(fused.model(), "SliceGradSum"), 1u);
    Session plain(grads.model, {.fuse = false});
    const Tensor a = fused.run(feeds()).at(grads.grads.at("w"));
    const Tensor b = plain.run(feeds()).at(grads.grads.at("w"));
    ASSERT_EQ(a.shape(), b.shape());
    for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.data<float>()[i], b.data<float>()[i]) << i;
  }
}

TEST(JoinSliceGradients, OverlappingOrPartialConstantSlicesStayOrSumInOneNode) {
  for (const auto& bounds : {std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {4, 8}, {8, 12}},
                             std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {4, 8}, {8, 11}},
                             std::vector<std::pair<int64_t, int64_t>>{{1, 4}, {4, 8}, {8, 12}}}) {
    Model m = build_gradient_graph(split_model(bounds, false), {.loss = "loss"}).model;
    EXPECT_EQ(join_slice_gradients(m), 1u) << bounds[0].first << ":" << bounds[0].second;
    EXPECT_EQ(count(m, "Concat"), 0u);
    EXPECT_EQ(count(m, "SliceGradSum"), 1u);
  }
}

}  // namespace
}  // namespace kiln

// fold_transposes_into_matmul (ir/fusion.h): a torch Linear's MatMul(X, Transpose(W)) becomes
// ai.kiln.FusedMatMul(X, W, transB 1) with the same output (float32: within 1e-5); a left-hand
// transpose of the last two axes folds too; other perms, a Transpose read twice and an integer
// product stay. A gradient graph through the folded Linear gives W's gradient in W's layout,
// without a Transpose, matching central differences of the unfolded forward.
#include <gtest/gtest.h>

#include <algorithm>

#include "graph_builder.h"
#include "ir/fusion.h"
#include "kernels/kernel_test_util.h"
#include "kiln/autodiff.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"

namespace kiln {
namespace {

// y = x @ W^T (+ b), x [2, 3, 4], W [5, 4]: torch's export of a Linear over a batch of sequences.
Model linear(bool leak_transpose = false, std::vector<int64_t> perm = {1, 0}) {
  GraphBuilder b("linear", 1);
  const std::string x = b.input("x", DType::Float32, {2, 3, 4});
  const std::string w = b.initializer("W", test_util::random_f32({5, 4}, 3, -1.f, 1.f));
  const std::string wt = b.op("Transpose", {w}, {{"perm", Attribute::of_ints(perm)}});
  const std::string y =
      b.op("Add", {b.op("MatMul", {x, wt}), b.initializer("b", test_util::random_f32({5}, 4, -1.f, 1.f))});
  b.output(y, "y", DType::Float32, {2, 3, 5});
  if (leak_transpose) b.output(wt, "wt", DType::Float32, {4, 5});
  Model m = b.build();
  infer_shapes(m);
  return m;
}

TEST(TransposeFold, ALinearsWeightIsReadTransposedInPlace) {
  const Model ops = linear();
  Model folded = ops;
  EXPECT_EQ(fold_transposes_into_matmul(folded), 1u);
  EXPECT_EQ(count(folded, "Transpose"), 0u);
  ASSERT_EQ(count(folded, "FusedMatMul"), 1u);
  const Tensor x = test_util::random_f32({2, 3, 4}, 5, -2.f, 2.f);
  const Tensor want = Session(ops, {.fuse = false}).run({{"x", x}}).at("y");
  const Tensor got = Session(folded, {.fuse = false}).run({{"x", x}}).at("y");
  for (int64_t i = 0; i < want.numel(); ++i) ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5) << i;
}

TEST(TransposeFold, LeftOperandsAndWhatStays) {
  GraphBuilder b("left", 2);
  const std::string a = b.input("a", DType::Float32, {2, 4, 3});
  const std::string c = b.input("c", DType::Float32, {2, 4, 5});
  const std::string at = b.op("Transpose", {a}, {{"perm", Attribute::of_ints({0, 2, 1})}});
  b.output(b.op("MatMul", {at, c}), "y", DType::Float32, {2, 3, 5});
  Model m = b.build();
  infer_shapes(m);
  Model folded = m;
  EXPECT_EQ(fold_transposes_into_matmul(folded), 1u);
  const std::map<std::string, Tensor> feeds{{"a", test_util::random_f32({2, 4, 3}, 6, -1.f, 1.f)},
                                            {"c", test_util::random_f32({2, 4, 5}, 7, -1.f, 1.f)}};
  const Tensor want = Session(m, {.fuse = false}).run(feeds).at("y");
  const Tensor got = Session(folded, {.fuse = false}).run(feeds).at("y");
  for (int64_t i = 0; i < want.numel(); ++i) ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5) << i;

  Model leaked = linear(/*leak_transpose=*/true);  // the transposed weight is also returned
  EXPECT_EQ(fold_transposes_into_matmul(leaked), 0u);
  GraphBuilder r("rotate", 3);  // a perm that is not a swap of the last two axes
  const std::string x = r.input("x", DType::Float32, {2, 3, 4});
  const std::string k = r.input("k", DType::Float32, {4, 2, 3});
  r.output(r.op("MatMul", {x, r.op("Transpose", {k}, {{"perm", Attribute::of_ints({2, 0, 1})}})}), "y", DType::Float32,
           {2, 3, 3});
  Model rotate = r.build();
  infer_shapes(rotate);
  EXPECT_EQ(fold_transposes_into_matmul(rotate), 0u);
  GraphBuilder n("ints", 4);  // FusedMatMul has float kernels only
  const std::string i = n.input("i", DType::Int64, {2, 3});
  const std::string j = n.input("j", DType::Int64, {4, 3});
  n.output(n.op("MatMul", {i, n.op("Transpose", {j}, {{"perm", Attribute::of_ints({1, 0})}})}), "y", DType::Int64,
           {2, 4});
  Model ints = n.build();
  infer_shapes(ints);
  EXPECT_EQ(fold_transposes_into_matmul(ints), 0u);
}

TEST(TransposeFold, TheWeightGradientComesOutInTheWeightsLayout) {
  GraphBuilder b("linear_loss", 5);
  const std::string x = b.input("x", DType::Float32, {2, 3, 4});
  const std::string w = b.initializer("W", test_util::random_f32({5, 4}, 3, -1.f, 1.f));
  const std::string y = b.op("MatMul", {x, b.op("Transpose", {w}, {{"perm", Attribute::of_ints({1, 0})}})});
  const std::string r = b.initializer("r", test_util::random_f32({2, 3, 5}, 8, -1.f, 1.f));
  b.output(b.op("ReduceSum", {b.op("Mul", {b.op("Tanh", {y}), r})}, {{"keepdims", Attribute::of_int(0)}}), "loss",
           DType::Float32, {});
  const Model forward = b.build();
  const GradientGraph grads = build_gradient_graph(forward, {.loss = "loss"});
  EXPECT_EQ(count(grads.model, "Transpose"), 0u);
  const Tensor input = test_util::random_f32({2, 3, 4}, 9, -1.f, 1.f);
  const Tensor dw = Session(grads.model).run({{"x", input}}).at(grads.grads.at("W"));
  ASSERT_EQ(dw.shape(), (Shape{5, 4}));
  Model probe = forward;
  Tensor& param = probe.graph.initializers.at("W");
  for (int64_t i = 0; i < param.numel(); ++i) {
    const float saved = param.data<float>()[i], step = 1e-2f;
    param.data<float>()[i] = saved + step;
    const double up = Session(probe, {.fuse = false}).run({{"x", input}}).at("loss").item_as_double();
    param.data<float>()[i] = saved - step;
    const double down = Session(probe, {.fuse = false}).run({{"x", input}}).at("loss").item_as_double();
    param.data<float>()[i] = saved;
    EXPECT_NEAR(dw.data<float>()[i], (up - down) / (2 * step), 2e-3) << "element " << i;
  }
}

}  // namespace
}  // namespace kiln

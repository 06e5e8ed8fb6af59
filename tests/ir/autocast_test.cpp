// autocast / strip_autocast (ir/autocast.h) on a plain graph: each float32 operand of a product is
// cast to bfloat16 once however many products read it, a float64 product is left alone, the nodes
// stay in topological order, the result is float32 within bfloat16's error of the original's, and
// strip_autocast gives back the original nodes. Through the gradient builder and artifacts:
// tests/training/mixed_precision_test.cpp.
#include "ir/autocast.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <tuple>

#include "graph_builder.h"
#include "ir/fusion.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "test_util.h"
#include "training/training_test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;
using kiln::testing::random_tensor;

// The pass on a plain graph: a shared operand is cast once, a float64 product is left alone, the
// graph stays in topological order, and strip_autocast gives back the original nodes.
TEST(Autocast, CastsEachOperandOnceAndStripsBack) {
  GraphBuilder b("products", 1);
  const std::string x = b.input("x", DType::Float32, {4, 8});
  const std::string w1 = b.initializer("w1", random_tensor({8, 8}, 1));
  const std::string w2 = b.initializer("w2", random_tensor({8, 8}, 2));
  const std::string h = b.op("Relu", {b.op("MatMul", {x, w1})});
  const std::string y = b.op("Add", {b.op("MatMul", {x, w2}), b.op("MatMul", {h, w2})});
  b.output(y, "y", DType::Float32, {4, 8});
  Tensor d = Tensor::zeros(DType::Float64, {8, 8});
  const std::string z = b.op("MatMul", {b.input("x64", DType::Float64, {4, 8}), b.initializer("w64", d)});
  b.output(z, "z", DType::Float64, {4, 8});
  Model built = b.build();
  infer_shapes(built);
  const Model original = built;
  // bfloat16 keeps 8 significant bits (2^-8 = 0.4%), float16 11 (0.05%).
  for (const auto& [low, tag, tolerance] :
       {std::tuple{DType::BFloat16, "bf16", 2e-2}, {DType::Float16, "fp16", 3e-3}}) {
    Model m = original;
    EXPECT_EQ(autocast(m, low), 3u);
    size_t casts = 0;
    for (const Node& n : m.graph.nodes) casts += n.op_type == "Cast";
    EXPECT_EQ(casts, 4u + 3u);  // x, w1, w2, h once each; three results back to float32
    EXPECT_NO_THROW(m.graph.topological_order());
    EXPECT_EQ(m.metadata.at(kMixedPrecisionKey), tag);
    const Tensor xs = random_tensor({4, 8}, 3);
    const auto low_out = Session(m).run({{"x", xs}, {"x64", Tensor::zeros(DType::Float64, {4, 8})}});
    const auto full = Session(original).run({{"x", xs}, {"x64", Tensor::zeros(DType::Float64, {4, 8})}});
    EXPECT_EQ(low_out.at("y").dtype(), DType::Float32);
    EXPECT_LT(test::relative_l2(low_out.at("y"), full.at("y")), tolerance) << tag;
    EXPECT_GT(test::relative_l2(low_out.at("y"), full.at("y")), 0.0) << tag;

    EXPECT_EQ(strip_autocast(m), 7u);
    ASSERT_EQ(m.graph.nodes.size(), original.graph.nodes.size());
    for (size_t i = 0; i < m.graph.nodes.size(); ++i) {
      EXPECT_EQ(m.graph.nodes[i].inputs, original.graph.nodes[i].inputs) << i;
      EXPECT_EQ(m.graph.nodes[i].outputs, original.graph.nodes[i].outputs) << i;
    }
    EXPECT_FALSE(m.metadata.count(kMixedPrecisionKey));
  }
  Model m = original;
  expect_error<Unsupported>([&] { autocast(m, DType::Float64); }, "supports bfloat16 and float16");
}

// A Session folds each 16-bit product's result Cast into the product (fold_result_casts_into_products):
// the products write float32, the Casts are gone, and the outputs are the unfolded graph's within
// the one 16-bit rounding of each product's result that the fold removes.
TEST(Autocast, SessionsFoldResultCastsIntoTheProducts) {
  for (const auto& [low, tolerance] : {std::pair{DType::BFloat16, 2e-2}, {DType::Float16, 3e-3}}) {
    for (const char* mode : {"emulate", "auto"}) {
      ::setenv("KILN_BF16", mode, 1);
      GraphBuilder b("products", 1);
      const std::string x = b.input("x", DType::Float32, {3, 16, 32});
      const std::string h = b.op("Relu", {b.op("MatMul", {x, b.initializer("w1", random_tensor({32, 64}, 1))})});
      const std::string y = b.op("MatMul", {h, b.initializer("w2", random_tensor({64, 8}, 2))});
      b.output(y, "y", DType::Float32, {3, 16, 8});
      Model m = b.build();
      infer_shapes(m);
      autocast(m, low);
      infer_shapes(m);
      SessionOptions plain;
      plain.fuse = false;
      Session folded(m), unfolded(m, plain);
      size_t casts = 0, float_products = 0;
      for (const Node& n : folded.model().graph.nodes) {
        casts += n.op_type == "Cast";
        float_products += n.op_type == "FusedMatMul" && n.has_attr("out_dtype");
      }
      EXPECT_EQ(float_products, 2u) << mode;
      EXPECT_EQ(casts, 4u) << mode;  // the operands' (x, w1, h, w2) stay, the two results' go
      const Tensor xs = random_tensor({3, 16, 32}, 3);
      const Tensor got = folded.run({{"x", xs}}).at("y"), want = unfolded.run({{"x", xs}}).at("y");
      EXPECT_EQ(got.dtype(), DType::Float32);
      EXPECT_LT(test::relative_l2(got, want), tolerance) << mode;
      EXPECT_GT(test::relative_l2(got, want), 0.0) << mode << ": the fold removed no rounding";
    }
  }
  ::unsetenv("KILN_BF16");
}

// A Session folds mixed precision's Cast of a Gelu's result into the Gelu (fold_16_bit_casts):
// the Gelu writes bfloat16 or float16 itself, its values those of the Gelu and the Cast or (rarely)
// the neighbouring 16-bit value, so the product after it moves by far less than a 16-bit rounding.
// Not when something else reads the float32 result (here, the graph returns it).
TEST(Autocast, SessionsFoldTheCastOfAGeluIntoTheGelu) {
  for (const DType low : {DType::BFloat16, DType::Float16}) {
    for (const bool returned : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(low)) + (returned ? ", Gelu's result returned" : ""));
      GraphBuilder b("gelu_product", 1);
      const std::string x = b.input("x", DType::Float32, {3, 16, 32});
      const std::string h = b.op("MatMul", {x, b.initializer("w1", random_tensor({32, 64}, 1))});
      const std::string half = b.op("Mul", {h, b.initializer("half", Tensor::scalar<float>(0.5f))});
      const std::string erf =
          b.op("Erf", {b.op("Div", {h, b.initializer("root2", Tensor::scalar<float>(1.4142135381698608f))})});
      const std::string gelu =
          b.op("Mul", {half, b.op("Add", {erf, b.initializer("one", Tensor::scalar<float>(1.f))})});
      b.output(b.op("MatMul", {gelu, b.initializer("w2", random_tensor({64, 8}, 2))}), "y", DType::Float32, {3, 16, 8});
      if (returned) b.output(gelu, "g", DType::Float32, {3, 16, 64});
      Model m = b.build();
      infer_shapes(m);
      autocast(m, low);
      infer_shapes(m);
      ASSERT_EQ(fuse_gelu(m), 1u);
      Model folded = m;
      EXPECT_EQ(fold_16_bit_casts(folded), returned ? 0u : 1u);
      const Session session(m);  // every Session pass
      size_t rounding = 0;
      for (const Node& n : session.model().graph.nodes) rounding += n.op_type == "Gelu" && n.has_attr("out_dtype");
      EXPECT_EQ(rounding, returned ? 0u : 1u);
      EXPECT_EQ(count(folded, "Cast"), count(m, "Cast") - (returned ? 0 : 1));
      const std::map<std::string, Tensor> feeds{{"x", random_tensor({3, 16, 32}, 3)}};
      const Tensor want = Session(m, {.fuse = false}).run(feeds).at("y");
      EXPECT_LT(test::relative_l2(Session(folded, {.fuse = false}).run(feeds).at("y"), want), 1e-4);
    }
  }
}

}  // namespace
}  // namespace kiln

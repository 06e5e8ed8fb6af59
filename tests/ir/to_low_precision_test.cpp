// to_low_precision and store_initializers_in (ir/to_low_precision.h) on a graph of many op kinds
// (products, softmax, LayerNorm, a Cast from int64, a float constant, a Resize whose scales are
// computed): the graph's inputs and outputs stay float32, every other float32 value becomes 16-bit
// except the Resize's scales and their computation, each op without a 16-bit kernel runs on its
// float32 one (kernels/registry.cpp's fallback), and the outputs are within the 16-bit type's
// error of float32's. Stored initializers give exactly the float32 graph on rounded weights.
#include "ir/to_low_precision.h"

#include <gtest/gtest.h>

#include <cstring>
#include <tuple>

#include "graph_builder.h"
#include "ir/autocast.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "test_util.h"
#include "training/training_test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;
using kiln::testing::random_tensor;

const ValueInfo* hint(const Model& m, const std::string& name) {
  for (const auto* list : {&m.graph.inputs, &m.graph.value_info, &m.graph.outputs})
    for (const ValueInfo& v : *list)
      if (v.name == name && v.has_type) return &v;
  return nullptr;
}

Model mixed_ops_model() {
  GraphBuilder b("mixed_ops", 7);
  const std::string x = b.input("x", DType::Float32, {2, 3, 4, 8});
  const std::string count = b.input("count", DType::Int64, {2, 3, 4, 1});
  const std::string h = b.op("MatMul", {x, b.initializer("w", random_tensor({8, 8}, 1))});
  const std::string shifted =
      b.op("Add", {h, b.op("Cast", {count}, {{"to", Attribute::of_int(dtype_to_onnx(DType::Float32))}})});
  const std::string sm = b.op("Softmax", {shifted}, {{"axis", Attribute::of_int(-1)}});
  const std::string ln =
      b.op("LayerNormalization",
           {sm, b.initializer("g", random_tensor({8}, 2)), b.initializer("bias", random_tensor({8}, 3))},
           {{"axis", Attribute::of_int(-1)}});
  const std::string half =
      b.op("Mul", {ln, b.op("Constant", {}, {{"value", Attribute::of_tensor(Tensor::scalar<float>(0.5f))}})});
  // Resize's scales: [1, 1, 2, 2] made from a float32 constant, which must stay float32.
  const std::string scales = b.op("Mul", {b.initializer("base_scales", Tensor::from_vector<float>({4}, {1, 1, 1, 1})),
                                          b.initializer("factor", Tensor::from_vector<float>({4}, {1, 1, 2, 2}))});
  const std::string up = b.op("Resize", {half, "", scales}, {{"mode", Attribute::of_string("nearest")}});
  b.output(up, "y", DType::Float32, {2, 3, 8, 16});
  b.output(sm, "probs", DType::Float32, {2, 3, 4, 8});
  Model m = b.build();
  infer_shapes(m);
  return m;
}

std::map<std::string, Tensor> feeds() {
  Tensor count = Tensor::empty(DType::Int64, {2, 3, 4, 1});
  for (int64_t i = 0; i < count.numel(); ++i) count.data<int64_t>()[i] = i % 3;
  return {{"x", random_tensor({2, 3, 4, 8}, 9)}, {"count", count}};
}

TEST(ToLowPrecision, RunsTheGraphIn16BitsWithFloat32InputsAndOutputs) {
  const Model original = mixed_ops_model();
  const auto full = Session(original).run(feeds());
  // bfloat16 keeps 8 significant bits (2^-8 = 0.4% per rounding), float16 11 (0.05%).
  for (const auto& [low, tag, tolerance] :
       {std::tuple{DType::BFloat16, "bf16", 2e-2}, {DType::Float16, "fp16", 3e-3}}) {
    Model m = original;
    EXPECT_GT(to_low_precision(m, low), 8u) << tag;
    EXPECT_EQ(m.metadata.at(kFullPrecisionKey), tag);
    EXPECT_NO_THROW(m.graph.topological_order());
    infer_shapes(m);
    for (const char* v : {"x", "y", "probs"}) {
      ASSERT_NE(hint(m, v), nullptr) << v;
      EXPECT_EQ(hint(m, v)->dtype, DType::Float32) << v;
    }
    EXPECT_EQ(m.graph.initializers.at("w").dtype(), low);
    EXPECT_EQ(m.graph.initializers.at("factor").dtype(), DType::Float32) << "Resize's scales stay float32";
    for (const Node& n : m.graph.nodes) {
      if (n.op_type == "MatMul" || n.op_type == "Softmax" || n.op_type == "LayerNormalization") {
        ASSERT_NE(hint(m, n.outputs[0]), nullptr) << n.label();
        EXPECT_EQ(hint(m, n.outputs[0])->dtype, low) << n.label();
      }
    }
    const auto got = Session(m).run(feeds());
    for (const char* out : {"y", "probs"}) {
      EXPECT_EQ(got.at(out).dtype(), DType::Float32);
      EXPECT_LT(test::relative_l2(got.at(out), full.at(out)), tolerance) << tag << " " << out;
      EXPECT_GT(test::relative_l2(got.at(out), full.at(out)), 0.0) << tag << " " << out;
    }
  }
  Model m = original;
  expect_error<Unsupported>([&] { to_low_precision(m, DType::Float64); }, "bfloat16 or float16");
  autocast(m, DType::BFloat16);
  expect_error<InvalidArgument>([&] { to_low_precision(m, DType::Float16); }, "already computes its products in bf16");
}

// Stored in 16 bits, the weights are read through Casts: the float32 graph on the rounded weights,
// bit for bit.
TEST(ToLowPrecision, StoredInitializersGiveTheFloat32GraphOnRoundedWeights) {
  const Model original = mixed_ops_model();
  for (DType low : {DType::BFloat16, DType::Float16}) {
    Model stored = original;
    EXPECT_EQ(store_initializers_in(stored, low), 5u);  // w, g, bias, base_scales, factor
    Model rounded = original;
    for (auto& [name, t] : rounded.graph.initializers) {
      if (t.dtype() != DType::Float32) continue;
      Tensor low_t = stored.graph.initializers.at(name + (low == DType::BFloat16 ? "/bf16" : "/fp16"));
      EXPECT_EQ(low_t.dtype(), low);
      Tensor back = Tensor::empty(DType::Float32, t.shape());
      for (int64_t i = 0; i < t.numel(); ++i)
        back.data<float>()[i] = low == DType::BFloat16 ? bfloat16_to_float(low_t.data<BFloat16>()[i])
                                                       : half_to_float(low_t.data<Half>()[i]);
      t = back;
    }
    const auto want = Session(rounded).run(feeds());
    const auto got = Session(stored).run(feeds());
    for (const char* out : {"y", "probs"})
      EXPECT_EQ(std::memcmp(got.at(out).raw_data(), want.at(out).raw_data(), want.at(out).nbytes()), 0) << out;
  }
}

}  // namespace
}  // namespace kiln

// The Tracer and export: node and value names, initializers keyed as torch's state_dict, symbolic
// dims, shared modules, constants and buffers, frozen metadata, and the file loading back.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "kiln/artifacts.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"
#include "models/nn/nn_test_modules.h"
#include "test_util.h"

namespace kiln::nn {
namespace {

using kiln::test::expect_error;
using kiln::test::has;
using namespace kiln::nn::testing;

std::shared_ptr<Sequential> mlp() {
  manual_seed(0);
  return std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<TLinear>(4, 3), std::make_shared<TRelu>(),
                                                             std::make_shared<TLinear>(3, 2)});
}

std::vector<std::string> node_names(const Model& m) {
  std::vector<std::string> names;
  for (const Node& n : m.graph.nodes) names.push_back(n.name);
  return names;
}

TEST(NnTracer, NodeNamesFollowTheModulePath) {
  auto net = mlp();
  Model m = net->to_onnx({{"input", {-1, 4}}});
  EXPECT_EQ(node_names(m), (std::vector<std::string>{"0/Gemm_0", "1/Relu_0", "2/Gemm_0", "/Identity_output"}));
  EXPECT_EQ(m.graph.nodes[0].outputs[0], "0/Gemm_0_output_0");
  EXPECT_EQ(m.graph.nodes[1].inputs[0], "0/Gemm_0_output_0");
  std::set<std::string> inits;
  for (const auto& [k, v] : m.graph.initializers) inits.insert(k);
  EXPECT_EQ(inits, (std::set<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(m.opset(""), 17);
  EXPECT_EQ(m.ir_version, 8);
  EXPECT_EQ(m.producer_name, "kiln");
  ASSERT_EQ(m.graph.inputs.size(), 1u);
  EXPECT_EQ(m.graph.inputs[0].dims[0].param, "input_dim0");
  EXPECT_EQ(m.graph.inputs[0].dims[1].value, 4);
  ASSERT_EQ(m.graph.outputs.size(), 1u);
  EXPECT_EQ(m.graph.outputs[0].name, "output");
  EXPECT_EQ(m.graph.outputs[0].dims[0].param, "output_dim0");
  EXPECT_EQ(m.metadata.count("kiln.frozen_params"), 0u);
  // Initializers hold the module's values (copies).
  const Tensor& w = m.graph.initializers.at("2.weight");
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  EXPECT_EQ(w.item_as_double(4), net->get_parameter("2.weight").item_as_double(4));
}

TEST(NnTracer, DynamicAxesNameDims) {
  auto net = mlp();
  ExportOptions o;
  o.output_names = {"logits"};
  Model m = net->to_onnx({{"x", {8, 4}}}, {{"x", {{0, "batch"}}}, {"logits", {{0, "batch"}}}}, o);
  EXPECT_EQ(m.graph.inputs[0].dims[0].param, "batch");
  EXPECT_EQ(m.graph.inputs[0].dims[0].value, -1);
  EXPECT_EQ(m.graph.outputs[0].name, "logits");
  EXPECT_EQ(m.graph.outputs[0].dims[0].param, "batch");
  EXPECT_EQ(m.graph.outputs[0].dims[1].value, 2);
  expect_error<InvalidArgument>(
      [&] {
        net->to_onnx({{"x", {8, 4}}}, {{"y", {{0, "batch"}}}});
      },
      "dynamic_axes names 'y'");
}

TEST(NnTracer, SharedModuleIsOneInitializerSetButTwoStateDictEntries) {
  manual_seed(1);
  auto lin = std::make_shared<TLinear>(3, 3);
  Sequential net(std::vector<ModulePtr>{lin, std::make_shared<TRelu>(), lin});
  Model m = net.to_onnx({{"input", {2, 3}}});
  EXPECT_EQ(m.graph.initializers.size(), 2u);
  EXPECT_EQ(m.graph.initializers.count("0.weight"), 1u);
  EXPECT_EQ(node_names(m)[2], "0/Gemm_1");  // the second call of module "0"
  EXPECT_EQ(m.graph.nodes[2].inputs[1], "0.weight");
  std::vector<std::string> keys;
  for (const auto& [k, t] : net.state_dict()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(net.named_parameters().size(), 2u);  // torch deduplicates
}

TEST(NnTracer, ParameterTwiceIsOneInitializerAndBadNamesAreErrors) {
  Tracer t;
  TLinear lin(2, 2);
  Var a = t.parameter(lin, "weight"), b = t.parameter(lin, "weight");
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.name, "weight");  // the root of this trace is `lin`
  expect_error<KeyError>([&] { t.parameter(lin, "gamma"); }, "Linear has no parameter or buffer 'gamma'");
  Var x = t.input("x", DType::Float32, {1, 2});
  expect_error<InvalidArgument>([&] { t.input("x", DType::Float32, {1}); }, "'x' is already taken");
  Var fake{"nowhere", DType::Float32, {1}};
  expect_error<InvalidArgument>([&] { t.op("Relu", {fake}, {}, DType::Float32, {1}); },
                                "input 'nowhere' is not a value of this trace");
  Var y = t.op("Relu", {x}, {}, DType::Float32, {1, 2});
  Var z = t.op("Relu", {y}, {}, DType::Float32, {1, 2});
  EXPECT_EQ(y.name, "/Relu_0_output_0");
  EXPECT_EQ(z.name, "/Relu_1_output_0");
  t.output(z, "out");
  Model m = t.finish();
  EXPECT_EQ(m.graph.initializers.size(), 1u);  // parameter() only: the weight
}

TEST(NnTracer, ConstantsAreNodesAndBuffersAreNeverTrained) {
  auto net = std::make_shared<Sequential>(
      std::vector<ModulePtr>{std::make_shared<TLinear>(3, 3), std::make_shared<TShift>(3)});
  Model m = net->to_onnx({{"input", {2, 3}}});
  // The constant 2 is a Constant node; the non-persistent buffer too (not in the state_dict); the
  // persistent float buffer is an initializer listed as frozen so that artifacts never train it.
  EXPECT_EQ(m.graph.initializers.count("1.shift"), 0u);
  EXPECT_EQ(m.graph.initializers.count("1.offset"), 1u);
  int constants = 0;
  for (const Node& n : m.graph.nodes) constants += n.op_type == "Constant";
  EXPECT_EQ(constants, 2);
  EXPECT_EQ(m.metadata.at("kiln.frozen_params"), "1.offset");
  std::vector<std::string> keys;
  for (const auto& [k, t] : net->state_dict()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"0.weight", "0.bias", "1.offset"}));
}

TEST(NnTracer, ExportedFileLoadsBackAndComputesTheForward) {
  auto net = mlp();
  const std::string path = (std::filesystem::path(::testing::TempDir()) / "kiln_nn_mlp.onnx").string();
  net->export_onnx(path, {{"input", {1, 4}}}, {{"input", {{0, "batch"}}}});
  Model back = load_model(path);
  EXPECT_EQ(back.graph.initializers.size(), 4u);
  Session s(back);
  Tensor x = Tensor::from_vector<float>({3, 4}, {1, -2, 3, 0.5f, -1, 0, 2, 1, 0.25f, 0.5f, -0.75f, 1});
  Tensor y = s.run({{"input", x}}).at("output");
  ASSERT_EQ(y.shape(), (Shape{3, 2}));
  // By hand: relu(x W0^T + b0) W2^T + b2 in double.
  const Tensor &w0 = net->get_parameter("0.weight"), &b0 = net->get_parameter("0.bias");
  const Tensor &w2 = net->get_parameter("2.weight"), &b2 = net->get_parameter("2.bias");
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t o = 0; o < 2; ++o) {
      double acc = b2.item_as_double(o);
      for (int64_t h = 0; h < 3; ++h) {
        double z = b0.item_as_double(h);
        for (int64_t i = 0; i < 4; ++i) z += x.item_as_double(r * 4 + i) * w0.item_as_double(h * 4 + i);
        acc += std::max(z, 0.0) * w2.item_as_double(o * 3 + h);
      }
      EXPECT_NEAR(y.item_as_double(r * 2 + o), acc, 1e-5);
    }
  // The same values through operator().
  Tensor y2 = (*net)({x})[0];
  for (int64_t i = 0; i < 6; ++i) EXPECT_NEAR(y2.item_as_double(i), y.item_as_double(i), 1e-6);
}

TEST(NnTracer, FrozenSubmoduleBecomesFrozenInArtifacts) {
  auto net = mlp();
  net->get_submodule("0")->requires_grad_(false);
  EXPECT_EQ(net->frozen_parameters(), (std::vector<std::string>{"0.weight", "0.bias"}));
  EXPECT_FALSE(net->get_submodule("0")->requires_grad("weight"));
  EXPECT_TRUE(net->get_submodule("2")->requires_grad("weight"));
  EXPECT_EQ(net->num_parameters(true), 3 * 2 + 2);
  Model m = net->to_onnx({{"input", {-1, 4}}});
  EXPECT_EQ(m.metadata.at("kiln.frozen_params"), "0.bias,0.weight");  // initializer order
  training::ArtifactOptions o;
  o.loss = training::LossType::CrossEntropyLoss;
  o.optimizer = training::OptimType::SGD;
  training::Artifacts a = training::build_artifacts(m, o);
  std::set<std::string> trainable, frozen;
  for (const auto& [name, p] : a.checkpoint.parameters()) (p.requires_grad() ? trainable : frozen).insert(name);
  EXPECT_EQ(trainable, (std::set<std::string>{"2.weight", "2.bias"}));
  EXPECT_EQ(frozen, (std::set<std::string>{"0.weight", "0.bias"}));
}

TEST(NnTracer, TrainingModeBatchNormExportsAsTorchDoes) {
  manual_seed(3);
  auto net = std::make_shared<Sequential>(
      std::vector<ModulePtr>{std::make_shared<TLinear>(4, 5), std::make_shared<TBatchNorm1d>(5),
                             std::make_shared<TRelu>(), std::make_shared<TLinear>(5, 3)});
  Model m = net->to_onnx({{"input", {-1, 4}}});
  const Node& bn = m.graph.nodes[1];
  EXPECT_EQ(bn.op_type, "BatchNormalization");
  EXPECT_EQ(bn.attr_int("training_mode"), 1);
  EXPECT_EQ(bn.outputs.size(), 3u);  // running stats dangling, as in torch's train() export
  EXPECT_EQ(m.graph.outputs.size(), 1u);
  EXPECT_EQ(m.graph.initializers.count("1.num_batches_tracked"), 0u);  // unused: not exported
  training::ArtifactOptions o;
  o.loss = training::LossType::CrossEntropyLoss;
  training::Artifacts a = training::build_artifacts(m, o);
  std::set<std::string> outs;
  for (const auto& v : a.training_model.graph.outputs) outs.insert(v.name);
  EXPECT_TRUE(outs.count("1.running_mean.updated"));
  EXPECT_TRUE(outs.count("1.running_var.updated"));
  net->eval();
  Model e = net->to_onnx({{"input", {-1, 4}}});
  EXPECT_EQ(e.graph.nodes[1].attr_int("training_mode", 0), 0);
  EXPECT_EQ(e.graph.nodes[1].outputs.size(), 1u);
}

}  // namespace
}  // namespace kiln::nn

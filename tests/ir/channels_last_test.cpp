// to_channels_last (ir/fusion.h): a ResNet-style network's convolutions, pools and the elementwise
// ops between them run channels last, with a Relu and a residual Add folded into the convolution
// before them and no Transpose when a global pool ends the region; a value read outside the region
// gets one Transpose back under its own name; constant operands are permuted; BatchNormalization in
// inference mode joins, its parameters graph inputs (an eval model's) or constants; a training
// graph's backward joins its forward (the gradient ops channels last, no Transpose left), its loss,
// running statistics and gradients within 2e-5 of the graph run without the pass; a lone Conv, a
// float64 network and the pools the kernels do not take stay. Each rewritten graph's outputs are
// within 1e-5 of the graph run without the pass (Session fuse off), float32.
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

using A = Attribute;

const Node& node_named(const Model& m, const std::string& name) {
  const auto it =
      std::find_if(m.graph.nodes.begin(), m.graph.nodes.end(), [&](const Node& n) { return n.name == name; });
  if (it == m.graph.nodes.end()) throw std::runtime_error("no node " + name);
  return *it;
}

std::map<std::string, A> window(int64_t k, int64_t stride, int64_t pad) {
  return {{"kernel_shape", A::of_ints({k, k})},
          {"strides", A::of_ints({stride, stride})},
          {"pads", A::of_ints({pad, pad, pad, pad})}};
}

// conv -> relu -> maxpool -> [conv -> relu -> conv] + identity -> relu -> (x scale[C,1,1] + 0.5) ->
// avgpool -> conv -> global pool -> flatten -> linear. `leak` also returns the block's output.
Model resnet_like(bool leak = false) {
  GraphBuilder b("resnet_like", 3);
  const std::string x = b.input("x", DType::Float32, {2, 3, 16, 16});
  std::string h = b.op("Relu", {b.conv2d(x, 3, 8, 3, 1, 1, "stem")}, {}, "stem_relu");
  h = b.op("MaxPool", {h}, window(3, 2, 1), "pool");
  std::string r = b.op("Relu", {b.conv2d(h, 8, 8, 3, 1, 1, "c1")}, {}, "c1_relu");
  r = b.conv2d(r, 8, 8, 3, 1, 1, "c2");
  const std::string block = b.op("Relu", {b.op("Add", {r, h}, {}, "add")}, {}, "block_relu");
  const std::string scale = b.initializer("scale", test_util::random_f32({8, 1, 1}, 5, 0.5f, 1.5f));
  h = b.op("Add", {b.op("Mul", {block, scale}, {}, "mul"), b.initializer("half", Tensor::scalar<float>(0.5f))}, {},
           "shift");
  h = b.op("AveragePool", {h}, window(2, 2, 0), "avg");
  h = b.op("GlobalAveragePool", {b.conv2d(h, 8, 16, 1, 1, 0, "c3")}, {}, "gap");
  h = b.op("Flatten", {h}, {{"axis", A::of_int(1)}});
  b.output(b.linear(h, 16, 4, "fc"), "y", DType::Float32, {2, 4});
  if (leak) b.output(block, "block", DType::Float32, {2, 8, 8, 8});
  Model m = b.build();
  infer_shapes(m);
  return m;
}

void expect_same_outputs(const Model& m, const std::map<std::string, Tensor>& feeds, double tol = 1e-5) {
  const auto want = Session(m, {.fuse = false}).run(feeds);
  Model fused = m;
  fuse(fused);
  const auto got = Session(fused, {.fuse = false}).run(feeds);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    const Tensor& g = got.at(name);
    ASSERT_EQ(g.shape(), w.shape()) << name;
    const std::vector<double> gv = test_util::as_doubles(g), wv = test_util::as_doubles(w);
    for (size_t i = 0; i < wv.size(); ++i) ASSERT_NEAR(gv[i], wv[i], tol) << name << " at " << i;
  }
}

TEST(ChannelsLast, ANetworkRunsChannelsLastBetweenItsEnds) {
  const Model m = resnet_like();
  Model cl = m;
  EXPECT_GT(to_channels_last(cl), 0u);
  EXPECT_EQ(count(cl, "Conv"), 0u);
  EXPECT_EQ(count(cl, "ConvChannelsLast"), 4u);
  EXPECT_EQ(count(cl, "MaxPoolChannelsLast"), 1u);
  EXPECT_EQ(count(cl, "AveragePoolChannelsLast"), 1u);
  EXPECT_EQ(count(cl, "GlobalAveragePoolChannelsLast"), 1u);
  EXPECT_EQ(count(cl, "Transpose"), 0u);  // the global pool writes channels first
  // The stem reads the channels-first input itself and applies its Relu; c2 adds the residual, then
  // its Relu.
  const Node& stem = node_named(cl, "stem");
  EXPECT_EQ(stem.domain, kKilnDomain);
  EXPECT_EQ(stem.attr_int("input_channels_last"), 0);
  EXPECT_EQ(stem.attr_string("activation"), "Relu");
  EXPECT_EQ(node_named(cl, "c1").attr_string("activation", ""), "Relu");
  const Node& c2 = node_named(cl, "c2");
  EXPECT_EQ(c2.attr_string("activation", ""), "Relu");
  EXPECT_EQ(c2.attr_int("input_channels_last"), 1);
  ASSERT_EQ(c2.inputs.size(), 4u);
  EXPECT_EQ(c2.inputs[3], node_named(cl, "c1").inputs[0]);  // the block's input, channels last
  EXPECT_EQ(count(cl, "Relu"), 0u);
  EXPECT_EQ(count(cl, "Add"), 1u);  // the shift by a constant
  // Mul's [8, 1, 1] scale is read as a permuted copy [1, 1, 1, 8]; the scalar as it is.
  const Node& mul = node_named(cl, "mul");
  EXPECT_EQ(cl.graph.initializers.at(mul.inputs[1]).shape(), (Shape{1, 1, 1, 8}));
  EXPECT_EQ(node_named(cl, "shift").inputs[1], "half");
  expect_same_outputs(m, {{"x", test_util::random_f32({2, 3, 16, 16}, 11, -1.f, 1.f)}});
}

TEST(ChannelsLast, AValueReadOutsideTheRegionGetsATransposeBack) {
  const Model m = resnet_like(/*leak=*/true);
  Model cl = m;
  to_channels_last(cl);
  ASSERT_EQ(count(cl, "Transpose"), 1u);
  const auto t = std::find_if(cl.graph.nodes.begin(), cl.graph.nodes.end(),
                              [](const Node& n) { return n.op_type == "Transpose"; });
  EXPECT_EQ(t->outputs[0], "block");
  EXPECT_EQ(t->attr_ints("perm"), (std::vector<int64_t>{0, 3, 1, 2}));
  expect_same_outputs(m, {{"x", test_util::random_f32({2, 3, 16, 16}, 12, -1.f, 1.f)}});
}

TEST(ChannelsLast, SmallMapsTakeTheProductShortcut) {
  // ResNet's last stage at 32x32: a 2x2 map, a stride-2 3x3 conv and a strided 1x1 to one position.
  GraphBuilder b("small", 4);
  const std::string x = b.input("x", DType::Float32, {3, 16, 2, 2});
  const std::string h = b.op("Relu", {b.conv2d(x, 16, 16, 3, 1, 1, "c0")});
  const std::string main = b.conv2d(b.op("Relu", {b.conv2d(h, 16, 32, 3, 2, 1, "c1")}), 32, 32, 3, 1, 1, "c2");
  const std::string down = b.conv2d(h, 16, 32, 1, 2, 0, "down");
  b.output(b.op("GlobalMaxPool", {b.op("Add", {main, down})}), "y", DType::Float32, {3, 32, 1, 1});
  Model m = b.build();
  infer_shapes(m);
  Model cl = m;
  to_channels_last(cl);
  EXPECT_EQ(count(cl, "ConvChannelsLast"), 4u);
  expect_same_outputs(m, {{"x", test_util::random_f32({3, 16, 2, 2}, 13, -1.f, 1.f)}});
}

TEST(ChannelsLast, AnEvalModelsBatchNormalizationRunsChannelsLast) {
  // Kiln's eval models keep BatchNormalization in inference mode, its parameters graph inputs.
  GraphBuilder b("eval", 8);
  const std::string x = b.input("x", DType::Float32, {2, 4, 6, 6});
  std::vector<std::string> p;
  for (const char* name : {"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"})
    p.push_back(b.input(name, DType::Float32, {8}));
  std::string h = b.op("BatchNormalization", {b.conv2d(x, 4, 8, 3, 1, 1, "c1"), p[0], p[1], p[2], p[3]},
                       {{"epsilon", A::of_float(1e-3f)}}, "bn");
  h = b.op("Relu", {h});
  const std::string bn2 =
      b.op("BatchNormalization",
           {b.conv2d(h, 8, 8, 3, 1, 1, "c2"), b.initializer("s2", test_util::random_f32({8}, 20, 0.5f, 2.f)),
            b.initializer("b2", test_util::random_f32({8}, 21, -1.f, 1.f)),
            b.initializer("m2", test_util::random_f32({8}, 22, -1.f, 1.f)),
            b.initializer("v2", test_util::random_f32({8}, 23, 0.5f, 2.f))},
           {}, "bn2");
  b.output(b.op("GlobalAveragePool", {bn2}), "y", DType::Float32, {2, 8, 1, 1});
  Model m = b.build();
  infer_shapes(m);
  Model cl = m;
  to_channels_last(cl);
  EXPECT_EQ(count(cl, "BatchNormalizationChannelsLast"), 2u);
  EXPECT_EQ(count(cl, "Transpose"), 0u);
  expect_same_outputs(m, {{"x", test_util::random_f32({2, 4, 6, 6}, 24, -1.f, 1.f)},
                          {"bn.weight", test_util::random_f32({8}, 25, 0.5f, 2.f)},
                          {"bn.bias", test_util::random_f32({8}, 26, -1.f, 1.f)},
                          {"bn.running_mean", test_util::random_f32({8}, 27, -1.f, 1.f)},
                          {"bn.running_var", test_util::random_f32({8}, 28, 0.5f, 2.f)}});
}

// resnet_like with BatchNormalization after each convolution (ResNet's training graph; `frozen`:
// in inference mode, as when fine-tuning a backbone), the loss a sum of the logits.
Model resnet_training_graph(bool frozen = false) {
  GraphBuilder b("resnet_train", 30, 15);
  const std::string x = b.input("x", DType::Float32, {4, 3, 16, 16});
  int norms = 0;
  auto bn = [&](const std::string& h, int64_t c) {
    const std::string p = "bn" + std::to_string(norms++);
    return b.op("BatchNormalization",
                {h, b.initializer(p + ".weight", test_util::random_f32({c}, 40 + norms, 0.5f, 1.5f)),
                 b.initializer(p + ".bias", test_util::random_f32({c}, 50 + norms, -0.5f, 0.5f)),
                 b.initializer(p + ".running_mean", Tensor::zeros(DType::Float32, {c})),
                 b.initializer(p + ".running_var", test_util::random_f32({c}, 60 + norms, 0.5f, 1.5f))},
                {{"training_mode", A::of_int(frozen ? 0 : 1)}, {"momentum", A::of_float(0.9f)}}, p);
  };
  std::string h = b.op("Relu", {bn(b.conv2d(x, 3, 8, 3, 1, 1, "stem"), 8)});
  h = b.op("MaxPool", {h}, window(3, 2, 1), "pool");
  std::string r = b.op("Relu", {bn(b.conv2d(h, 8, 8, 3, 1, 1, "c1"), 8)});
  r = bn(b.conv2d(r, 8, 8, 3, 1, 1, "c2"), 8);
  h = b.op("Relu", {b.op("Add", {r, h})});
  r = b.op("Relu", {bn(b.conv2d(h, 8, 16, 3, 2, 1, "c3"), 16)});  // a downsampling block
  r = bn(b.conv2d(r, 16, 16, 3, 1, 1, "c4"), 16);
  h = b.op("Relu", {b.op("Add", {r, bn(b.conv2d(h, 8, 16, 1, 2, 0, "down"), 16)})});
  h = b.op("AveragePool", {h}, window(2, 1, 0), "avg");
  h = b.op("Flatten", {b.op("GlobalAveragePool", {h})}, {{"axis", A::of_int(1)}});
  b.output(b.op("ReduceSum", {b.linear(h, 16, 5, "fc")}, {{"keepdims", A::of_int(0)}}), "loss", DType::Float32, {});
  Model m = b.build();
  for (Node& n : m.graph.nodes)  // the running statistics, as a training graph returns them
    if (n.op_type == "BatchNormalization" && !frozen) {
      for (const char* s : {".running_mean_out", ".running_var_out"}) {
        n.outputs.push_back(n.name + s);
        m.graph.outputs.push_back(ValueInfo{n.name + s, DType::Float32, true, false, {}, "", ValueKind::Tensor});
      }
    }
  infer_shapes(m);
  std::vector<std::string> params;
  for (const auto& [name, t] : m.graph.initializers)
    if (name.find("running") == std::string::npos) params.push_back(name);
  return build_gradient_graph(m, {.loss = "loss", .requires_grad = params}).model;
}

TEST(ChannelsLast, ATrainingGraphsBackwardRunsChannelsLast) {
  const Model m = resnet_training_graph();
  Model cl = m;
  EXPECT_GT(to_channels_last(cl), 0u);
  EXPECT_EQ(count(cl, "Conv") + count(cl, "ConvGrad") + count(cl, "BatchNormalization") +
                count(cl, "BatchNormalizationGrad") + count(cl, "MaxPoolGrad") + count(cl, "AveragePoolGrad") +
                count(cl, "GlobalAveragePoolGrad"),
            0u);
  EXPECT_EQ(count(cl, "ConvGradChannelsLast"), 6u);
  EXPECT_EQ(count(cl, "BatchNormalizationGradChannelsLast"), 6u);
  EXPECT_EQ(count(cl, "MaxPoolGradChannelsLast"), 1u);
  EXPECT_EQ(count(cl, "GlobalAveragePoolGradChannelsLast"), 1u);
  EXPECT_EQ(count(cl, "Transpose"), 0u);
  const Node& stem_grad = *std::find_if(cl.graph.nodes.begin(), cl.graph.nodes.end(), [](const Node& n) {
    return n.op_type == "ConvGradChannelsLast" && n.attr_int("input_channels_last", 1) == 0;
  });
  EXPECT_EQ(stem_grad.inputs[1], "x");  // the stem's gradient reads the input as it is
  expect_same_outputs(m, {{"x", test_util::random_f32({4, 3, 16, 16}, 70, -1.f, 1.f)}}, 2e-5);
}

TEST(ChannelsLast, AFrozenBatchNormalizationsTrainingGraph) {
  Model m = resnet_training_graph(/*frozen=*/true);
  infer_shapes(m);  // the gradient's 1 / sqrt(var + epsilon) typed, as in an exported training model
  Model cl = m;
  EXPECT_GT(to_channels_last(cl), 0u);
  EXPECT_EQ(count(cl, "BatchNormalizationGradChannelsLast"), 6u);
  EXPECT_EQ(count(cl, "Transpose"), 0u);
  expect_same_outputs(m, {{"x", test_util::random_f32({4, 3, 16, 16}, 72, -1.f, 1.f)}}, 2e-5);
}

TEST(ChannelsLast, WhatStays) {
  {  // a lone convolution: its reorders would only move into a Transpose
    GraphBuilder b("lone", 5);
    const std::string x = b.input("x", DType::Float32, {1, 4, 8, 8});
    b.output(b.op("Relu", {b.conv2d(x, 4, 8, 3, 1, 1, "c")}), "y", DType::Float32, {1, 8, 8, 8});
    Model m = b.build();
    EXPECT_EQ(to_channels_last(m), 0u);
  }
  {  // a weight the region computes: read channels first, through a Transpose
    GraphBuilder b("weights", 9);
    const std::string z = b.input("z", DType::Float32, {4, 4, 5, 5});
    const std::string x = b.input("x", DType::Float32, {1, 4, 8, 8});
    const std::string w = b.conv2d(b.conv2d(z, 4, 4, 3, 1, 1, "c1"), 4, 4, 3, 1, 0, "c2");  // [4, 4, 3, 3]
    b.output(b.op("Conv", {x, w}, {}, "dynamic"), "y", DType::Float32, {1, 4, 6, 6});
    Model m = b.build();
    infer_shapes(m);
    Model cl = m;
    to_channels_last(cl);
    EXPECT_EQ(node_named(cl, "dynamic").op_type, "Conv");
    EXPECT_EQ(count(cl, "Transpose"), 1u);
    expect_same_outputs(m, {{"z", test_util::random_f32({4, 4, 5, 5}, 15, -1.f, 1.f)},
                            {"x", test_util::random_f32({1, 4, 8, 8}, 16, -1.f, 1.f)}});
  }
  {  // a float64 network
    GraphBuilder b("f64", 7);
    const std::string x = b.input("x", DType::Float64, {1, 4, 8, 8});
    const std::string w = b.initializer("w", test_util::random_real(DType::Float64, {4, 4, 3, 3}, 1, -1, 1));
    const std::string h = b.op("Conv", {b.op("Conv", {x, w}), w});
    b.output(b.op("GlobalAveragePool", {h}), "y", DType::Float64, {1, 4, 1, 1});
    Model m = b.build();
    EXPECT_EQ(to_channels_last(m), 0u);
  }
  {  // MaxPool's Indices and AveragePool counting padding with ceil_mode
    GraphBuilder b("stays", 6);
    const std::string x = b.input("x", DType::Float32, {1, 4, 8, 8});
    const std::string h = b.conv2d(b.conv2d(x, 4, 4, 3, 1, 1, "c1"), 4, 4, 3, 1, 1, "c2");
    const std::string p = b.op("MaxPool", {h}, window(2, 2, 0), "pool");
    std::map<std::string, A> counted = window(3, 2, 0);
    counted["ceil_mode"] = A::of_int(1);
    counted["count_include_pad"] = A::of_int(1);
    b.output(b.op("AveragePool", {p}, counted, "avg"), "y", DType::Float32, {1, 4, 2, 2});
    Model m = b.build();
    infer_shapes(m);
    for (Node& n : m.graph.nodes)
      if (n.op_type == "MaxPool") n.outputs.push_back("indices");
    m.graph.outputs.push_back(ValueInfo{"indices", DType::Int64});
    Model cl = m;
    to_channels_last(cl);
    EXPECT_EQ(count(cl, "ConvChannelsLast"), 2u);
    EXPECT_EQ(count(cl, "MaxPool"), 1u);
    EXPECT_EQ(count(cl, "AveragePool"), 1u);
    EXPECT_EQ(count(cl, "Transpose"), 1u);  // the convolutions' output, back for the MaxPool
    expect_same_outputs(m, {{"x", test_util::random_f32({1, 4, 8, 8}, 14, -1.f, 1.f)}});
  }
}

}  // namespace
}  // namespace kiln

// fuse_attention (ir/fusion.h): attention's MatMul(Softmax(Z), V) chains as torch.onnx writes them
// (a causal Where mask through MaskedSoftmax; nn.MultiheadAttention's additive padding mask with
// the scale cast from an integer constant; a plain scaled softmax) become one ai.kiln.Attention
// whose output matches the unfused ops (float32: within 1e-5 of probabilities summing to 1 over
// values of size ~1); chains whose intermediates are read elsewhere, or whose operands' ranks are
// unknown, stay. A gradient graph built through the fused node matches central differences of the
// unfused forward, with the probabilities kept from the forward and recomputed in the backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "graph_builder.h"
#include "ir/fusion.h"
#include "kernels/kernel_test_util.h"
#include "kiln/autodiff.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"

namespace kiln {
namespace {

enum class Form { CausalWhere, AdditiveBias, Scaled, Bare };

constexpr int64_t kB = 2, kH = 3, kS = 6, kD = 4;

std::string constant(GraphBuilder& b, const Tensor& t) {
  return b.op("Constant", {}, {{"value", Attribute::of_tensor(t)}});
}

// y = softmax(z) v with z from q kt in `form`; `leak` also returns the probabilities.
Model attention(Form form, bool leak = false) {
  GraphBuilder b("attention", 1);
  const std::string q = b.input("q", DType::Float32, {kB, kH, kS, kD});
  const std::string kt = b.input("kt", DType::Float32, {kB, kH, kD, kS});
  const std::string v = b.input("v", DType::Float32, {kB, kH, kS, kD});
  const std::string s = b.op("MatMul", {q, kt});
  std::string z;
  if (form == Form::CausalWhere) {
    Tensor mask = Tensor::empty(DType::Bool, {1, 1, kS, kS});
    for (int64_t i = 0; i < kS; ++i)
      for (int64_t j = 0; j < kS; ++j) mask.data<bool>()[i * kS + j] = j > i;
    const std::string scaled = b.op("Mul", {s, constant(b, Tensor::scalar<float>(0.5f))});
    z = b.op("Where", {b.initializer("causal", mask), constant(b, Tensor::scalar<float>(-INFINITY)), scaled});
  } else if (form == Form::AdditiveBias) {
    const std::string k = b.op("Cast", {constant(b, Tensor::scalar<int64_t>(1))}, {{"to", Attribute::of_int(1)}});
    const std::string pad = b.input("pad", DType::Float32, {kB, 1, 1, kS});
    z = b.op("Add", {b.op("Mul", {s, k}), pad});
  } else if (form == Form::Scaled) {
    z = b.op("Div", {s, constant(b, Tensor::scalar<float>(2.f))});
  } else {
    z = s;
  }
  const std::string p = b.op("Softmax", {z}, {{"axis", Attribute::of_int(-1)}});
  b.output(b.op("MatMul", {p, v}), "y", DType::Float32, {kB, kH, kS, kD});
  if (leak) b.output(p, "p", DType::Float32, {kB, kH, kS, kS});
  Model m = b.build();
  infer_shapes(m);
  return m;
}

std::map<std::string, Tensor> feeds(uint64_t seed) {
  Tensor pad = Tensor::zeros(DType::Float32, {kB, 1, 1, kS});
  pad.data<float>()[kS - 1] = pad.data<float>()[kS - 2] = -INFINITY;  // the first row's last two tokens
  return {{"q", test_util::random_f32({kB, kH, kS, kD}, seed, -2.f, 2.f)},
          {"kt", test_util::random_f32({kB, kH, kD, kS}, seed + 1, -2.f, 2.f)},
          {"v", test_util::random_f32({kB, kH, kS, kD}, seed + 2, -1.f, 1.f)},
          {"pad", pad}};
}

TEST(AttentionFusion, EachExportedFormBecomesOneNodeThatMatchesTheOps) {
  for (const Form form : {Form::CausalWhere, Form::AdditiveBias, Form::Scaled, Form::Bare}) {
    SCOPED_TRACE(testing::Message() << "form " << static_cast<int>(form));
    const Model ops = attention(form);
    Model fused = ops;
    fuse(fused);
    ASSERT_EQ(count(fused, "Attention"), 1u);
    for (const char* gone : {"MatMul", "Softmax", "MaskedSoftmax", "Where", "Add", "Mul", "Div"})
      EXPECT_EQ(count(fused, gone), 0u) << gone;
    std::map<std::string, Tensor> in = feeds(7);
    if (form != Form::AdditiveBias) in.erase("pad");
    const Tensor want = Session(ops, {.fuse = false}).run(in).at("y");
    const Tensor got = Session(fused).run(in).at("y");
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5) << "element " << i;
  }
}

TEST(AttentionFusion, WhatIsNotAttentionStays) {
  Model leaked = attention(Form::Scaled, /*leak=*/true);  // the probabilities are returned too
  EXPECT_EQ(fuse_attention(leaked), 0u);
  Model unranked = attention(Form::Bare);  // no hint and no op that tells q's rank
  unranked.graph.value_info.clear();
  unranked.graph.inputs[0].has_shape = false;
  EXPECT_EQ(fuse_attention(unranked), 0u);
  Model old = attention(Form::Bare);
  old.opsets[""] = 12;
  EXPECT_EQ(fuse_attention(old), 0u);
}

// fc layers make q, k and v from x; the loss weighs y. Every weight's gradient from the graph built
// through the fused node, with the probabilities kept and recomputed, against central differences
// of the unfused forward.
TEST(AttentionFusion, GradientsMatchCentralDifferencesKeptOrRecomputed) {
  for (const Form form : {Form::CausalWhere, Form::AdditiveBias}) {
    GraphBuilder b("self_attention", 3);
    const std::string x = b.input("x", DType::Float32, {kS, kD});
    const std::string q =
        b.op("Reshape", {b.linear(x, kD, kD, "q"), constant(b, Tensor::from_vector<int64_t>({3}, {1, kS, kD}))});
    const std::string k = b.linear(x, kD, kD, "k");
    const std::string v =
        b.op("Reshape", {b.linear(x, kD, kD, "v"), constant(b, Tensor::from_vector<int64_t>({3}, {1, kS, kD}))});
    const std::string kt = b.op("Transpose", {k}, {{"perm", Attribute::of_ints({1, 0})}});
    std::string z = b.op("Mul", {b.op("MatMul", {q, kt}), constant(b, Tensor::scalar<float>(0.5f))});
    if (form == Form::CausalWhere) {
      Tensor mask = Tensor::empty(DType::Bool, {kS, kS});
      for (int64_t i = 0; i < kS * kS; ++i) mask.data<bool>()[i] = i % kS > i / kS;
      z = b.op("Where", {b.initializer("causal", mask), constant(b, Tensor::scalar<float>(-1e4f)), z});
    } else {
      z = b.op("Add", {b.initializer("bias", test_util::random_f32({1, 1, kS}, 5, -1.f, 1.f)), z});
    }
    const std::string y = b.op("MatMul", {b.op("Softmax", {z}, {{"axis", Attribute::of_int(-1)}}), v});
    const std::string weights = b.initializer("weights", test_util::random_f32({1, kS, kD}, 9, -2.f, 2.f));
    b.output(b.op("ReduceSum", {b.op("Mul", {y, weights})}, {{"keepdims", Attribute::of_int(0)}}), "loss",
             DType::Float32, {});
    const Model forward = b.build();
    const GradientGraph grads = build_gradient_graph(forward, {.loss = "loss"});
    ASSERT_EQ(count(grads.model, "Attention"), 1u);
    ASSERT_EQ(count(grads.model, "AttentionGrad"), 1u);
    EXPECT_EQ(count(grads.model, "Softmax") + count(grads.model, "MaskedSoftmax"), 0u);
    const Tensor input = test_util::random_f32({kS, kD}, 12, -2.f, 2.f);
    Model probe = forward;
    auto loss_at = [&]() { return Session(probe, {.fuse = false}).run({{"x", input}}).at("loss").item_as_double(); };
    for (const char* mode : {"keep", "recompute"}) {
      SCOPED_TRACE(testing::Message() << "form " << static_cast<int>(form) << ", probabilities " << mode);
      Model g = grads.model;
      for (Node& n : g.graph.nodes)
        if (n.op_type == "Attention") n.attrs["probabilities"] = Attribute::of_string(mode);
      std::vector<std::string> names{"q.weight", "k.weight", "v.weight", "k.bias"};
      if (form == Form::AdditiveBias) names.push_back("bias");
      std::vector<std::string> outs;
      for (const std::string& name : names) outs.push_back(grads.grads.at(name));
      const auto got = Session(g).run({{"x", input}}, outs);
      for (size_t w = 0; w < names.size(); ++w) {
        Tensor& param = probe.graph.initializers.at(names[w]);
        const Tensor& grad = got.at(outs[w]);
        for (int64_t i = 0; i < param.numel(); i += 3) {
          const float saved = param.data<float>()[i], step = 1e-2f;
          param.data<float>()[i] = saved + step;
          const double up = loss_at();
          param.data<float>()[i] = saved - step;
          const double down = loss_at();
          param.data<float>()[i] = saved;
          EXPECT_NEAR(grad.data<float>()[i], (up - down) / (2 * step), 2e-3) << names[w] << " element " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln

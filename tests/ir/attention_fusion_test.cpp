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

// Self-attention over projections stored as the exporters write them, in float64: torch's
// nn.MultiheadAttention ([S, B*H, D] split into heads by Transpose(1, 0, 2), the keys by (1, 2, 0),
// q divided by sqrt(D) before the scores, the heads joined back by Transpose(1, 0, 2)) or Hugging
// Face's ([B, S, H, D] by (0, 2, 1, 3), the keys by (0, 2, 3, 1), the scores multiplied by the
// scale). The projections are parameters, so that the backward reaches them through the views.
Model projected_attention(bool hugging_face) {
  GraphBuilder b("views", 1);
  const Shape stored = hugging_face ? Shape{2, kS, kH, kD} : Shape{kS, kB * kH, kD};
  const auto param = [&](const char* name, uint64_t seed) {
    return b.initializer(name, test_util::cast_to(test_util::random_f32(stored, seed, -1.5f, 1.5f), DType::Float64));
  };
  const auto transpose = [&](const std::string& x, std::vector<int64_t> perm) {
    return b.op("Transpose", {x}, {{"perm", Attribute::of_ints(std::move(perm))}});
  };
  const auto scalar = [&](double v) { return constant(b, Tensor::scalar<double>(v)); };
  const std::string q = param("q.proj", 1), k = param("k.proj", 2), v = param("v.proj", 3);
  std::string y;
  Shape y_shape;
  if (hugging_face) {
    const std::string s = b.op("MatMul", {transpose(q, {0, 2, 1, 3}), transpose(k, {0, 2, 3, 1})});
    const std::string p = b.op("Softmax", {b.op("Mul", {s, scalar(0.5)})}, {{"axis", Attribute::of_int(-1)}});
    y = transpose(b.op("MatMul", {p, transpose(v, {0, 2, 1, 3})}), {0, 2, 1, 3});
    y_shape = stored;
  } else {
    const std::string qs = b.op("Div", {transpose(q, {1, 0, 2}), scalar(2.0)});
    const std::string s = b.op("MatMul", {qs, transpose(k, {1, 2, 0})});
    const std::string p = b.op("Softmax", {s}, {{"axis", Attribute::of_int(-1)}});
    y = transpose(b.op("MatMul", {p, transpose(v, {1, 0, 2})}), {1, 0, 2});
    y_shape = stored;
  }
  const std::string w =
      b.initializer("w", test_util::cast_to(test_util::random_f32(y_shape, 9, -2.f, 2.f), DType::Float64));
  b.output(b.op("ReduceSum", {b.op("Mul", {y, w})}, {{"keepdims", Attribute::of_int(0)}}), "loss", DType::Float64, {});
  Model m = b.build();
  infer_shapes(m);
  return m;
}

// fold_views_into_attention: both exported forms' head-splitting Transposes, the heads' join and
// the scale (torch's q / sqrt(D)) go into the fused node (no Transpose or Div left), in an inference
// Session and in the gradient graph (whose AttentionGrad reads and writes the same layouts). The
// loss matches the unfused ops within 1e-12, and every projection's gradient matches central
// differences of the unfused forward within 1e-8 (float64, step 1e-5).
TEST(AttentionFusion, HeadSplittingTransposesFoldIntoTheNodeAndItsGradient) {
  for (const bool hugging_face : {false, true}) {
    SCOPED_TRACE(hugging_face ? "Hugging Face's [B, S, H, D]" : "nn.MultiheadAttention's [S, B*H, D]");
    const Model forward = projected_attention(hugging_face);
    Model fused = forward;
    fuse(fused);
    EXPECT_EQ(count(fused, "Attention"), 1u);
    for (const char* gone : {"Transpose", "Div"}) EXPECT_EQ(count(fused, gone), 0u) << gone;
    EXPECT_EQ(count(fused, "Mul"), 1u);  // the loss's
    Model unfused = forward;
    const auto loss_of = [](const Model& m, bool fuse) {
      return Session(m, {.fuse = fuse}).run({}).at("loss").item_as_double();
    };
    EXPECT_NEAR(loss_of(fused, true), loss_of(unfused, false), 1e-12);
    const GradientGraph grads = build_gradient_graph(forward, {.loss = "loss"});
    EXPECT_EQ(count(grads.model, "Transpose"), 0u);
    EXPECT_EQ(count(grads.model, "Div"), 0u);
    for (const Node& n : grads.model.graph.nodes)
      if (n.op_type == "AttentionGrad") {
        EXPECT_TRUE(n.has_attr("perm_q") && n.has_attr("perm_kt") && n.has_attr("perm_v") && n.has_attr("perm_y"));
      }
    for (const char* mode : {"keep", "recompute"}) {
      SCOPED_TRACE(mode);
      Model g = grads.model;
      for (Node& n : g.graph.nodes)
        if (n.op_type == "Attention") n.attrs["probabilities"] = Attribute::of_string(mode);
      const std::vector<std::string> names{"q.proj", "k.proj", "v.proj"};
      std::vector<std::string> outs;
      for (const std::string& name : names) outs.push_back(grads.grads.at(name));
      const auto got = Session(g).run({}, outs);
      for (size_t p = 0; p < names.size(); ++p) {
        Tensor& param = unfused.graph.initializers.at(names[p]);
        const Tensor& grad = got.at(outs[p]);
        ASSERT_EQ(grad.shape(), param.shape());
        for (int64_t i = 0; i < param.numel(); i += 5) {
          const double saved = param.data<double>()[i], step = 1e-5;
          param.data<double>()[i] = saved + step;
          const double up = loss_of(unfused, false);
          param.data<double>()[i] = saved - step;
          const double down = loss_of(unfused, false);
          param.data<double>()[i] = saved;
          EXPECT_NEAR(grad.data<double>()[i], (up - down) / (2 * step), 1e-8) << names[p] << " element " << i;
        }
      }
    }
  }
}

// A Transpose something else also reads stays (the rest folds), and under mixed precision the
// gradient builder leaves the attention's operands packed (its bfloat16 products read them so).
TEST(AttentionFusion, ViewsThatCannotFoldStay) {
  Model m = projected_attention(false);
  fuse_attention(m);
  for (const Node& n : m.graph.nodes)
    if (n.op_type == "Attention") {
      ValueInfo returned = m.graph.outputs[0];
      returned.name = n.inputs[2];
      m.graph.outputs.push_back(returned);
    }
  EXPECT_EQ(fold_views_into_attention(m), 1u);
  EXPECT_EQ(count(m, "Transpose"), 1u);  // V's, which the graph returns too
  for (const Node& n : m.graph.nodes)
    if (n.op_type == "Attention") {
      EXPECT_TRUE(n.has_attr("perm_q") && n.has_attr("perm_kt") && n.has_attr("perm_y"));
      EXPECT_FALSE(n.has_attr("perm_v"));
    }
  Model f32 = projected_attention(false);
  for (auto& [name, t] : f32.graph.initializers) t = test_util::cast_to(t, DType::Float32);
  for (Node& n : f32.graph.nodes)
    if (n.op_type == "Constant") n.attrs["value"] = Attribute::of_tensor(Tensor::scalar<float>(2.f));
  f32.graph.outputs[0].dtype = DType::Float32;
  f32.graph.value_info.clear();
  infer_shapes(f32);
  const GradientGraph mixed = build_gradient_graph(f32, {.loss = "loss", .mixed_precision = DType::BFloat16});
  EXPECT_EQ(count(mixed.model, "Attention"), 1u);
  for (const Node& n : mixed.model.graph.nodes)
    if (n.op_type == "Attention" || n.op_type == "AttentionGrad") {
      EXPECT_FALSE(n.has_attr("perm_q")) << n.op_type;
    }
}

}  // namespace
}  // namespace kiln

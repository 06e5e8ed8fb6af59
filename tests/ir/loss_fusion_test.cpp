// The loss passes of ir/fusion.h. fuse_loss_with_gradient: a training graph's
// SoftmaxCrossEntropyLoss and its gradient become one ai.kiln.SoftmaxCrossEntropyLossAndGrad in a
// Session, whose loss and parameter gradients match the unfused graph's (within 1e-6 (|x| + 1),
// the loss's exponentials being float32 ones); a loss read before its gradient, log_prob read
// downstream, or a gradient with other attributes stays as it is. fold_score_slices_into_labels:
// the shifted language-model loss over sliced logits gives the same loss and gradients (1e-6
// (|x| + 1)) over the unsliced logits and padded labels, with no Slice of the logits nor SliceGrad
// left, with the rows' shape constant or computed from the logits' Shape (torch's dynamic axes)
// and the logits with or without a shape hint; slices of the classes, unreduced losses and rows
// that are not the logits' last axis stay.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>

#include "graph_builder.h"
#include "ir/fusion.h"
#include "kiln/autodiff.h"
#include "kiln/onnx_io.h"
#include "kiln/session.h"

namespace kiln {
namespace {

// x [batch, 8] -> Linear(8, 16) -> Relu -> Linear(16, classes) -> SoftmaxCrossEntropyLoss.
Model classifier(int64_t classes, bool weighted, bool log_prob_output) {
  GraphBuilder b("classifier", 5);
  const std::string x = b.input("x", DType::Float32, {-1, 8});
  const std::string labels = b.input("labels", DType::Int64, {-1});
  const std::string h = b.op("Relu", {b.linear(x, 8, 16, "fc1")});
  const std::string scores = b.linear(h, 16, classes, "fc2");
  std::vector<std::string> in{scores, labels};
  if (weighted) {
    Tensor w = Tensor::empty(DType::Float32, {classes});
    for (int64_t c = 0; c < classes; ++c) w.data<float>()[c] = 0.5f + 0.25f * static_cast<float>(c % 4);
    in.push_back(b.initializer("class_weights", w));
  }
  const std::map<std::string, Attribute> attrs{{"reduction", Attribute::of_string("mean")},
                                               {"ignore_index", Attribute::of_int(-100)}};
  const std::string loss = b.op("SoftmaxCrossEntropyLoss", in, attrs);
  b.output(loss, "loss", DType::Float32, {});
  if (log_prob_output) {
    Model m = b.build();
    Node& sce = m.graph.nodes.back();
    sce.outputs.push_back("log_prob");
    ValueInfo v;
    v.name = "log_prob";
    v.has_type = true;
    m.graph.outputs.push_back(v);
    return m;
  }
  return b.build();
}

std::map<std::string, Tensor> feeds(int64_t classes) {
  Tensor x = Tensor::empty(DType::Float32, {12, 8});
  std::mt19937 gen(3);
  std::normal_distribution<float> d(0.f, 1.f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = d(gen);
  Tensor labels = Tensor::empty(DType::Int64, {12});
  for (int64_t i = 0; i < 12; ++i) labels.data<int64_t>()[i] = i % 5 == 2 ? -100 : (i * 7) % classes;
  return {{"x", x}, {"labels", labels}};
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double w = want.item_as_double(i);
    ASSERT_NEAR(got.item_as_double(i), w, 1e-6 * (std::fabs(w) + 1.0)) << what << " at " << i;
  }
}

TEST(LossFusion, TheLossAndItsGradientRunAsOneNodeWithTheUnfusedResults) {
  for (int64_t classes : {10, 3000})  // 3000: rows the vectorised exponentials take
    for (bool weighted : {false, true}) {
      const Model forward = classifier(classes, weighted, false);
      const GradientGraph grads = build_gradient_graph(forward, {.loss = "loss"});
      Session fused(grads.model);
      EXPECT_EQ(count(fused.model(), "SoftmaxCrossEntropyLossAndGrad"), 1u);
      EXPECT_EQ(count(fused.model(), "SoftmaxCrossEntropyLoss"), 0u);
      EXPECT_EQ(count(fused.model(), "SoftmaxCrossEntropyLossGrad"), 0u);
      Session plain(grads.model, {.fuse = false});
      EXPECT_EQ(count(plain.model(), "SoftmaxCrossEntropyLossAndGrad"), 0u);
      const auto a = fused.run(feeds(classes));
      const auto b = plain.run(feeds(classes));
      expect_close(a.at("loss"), b.at("loss"), "loss");
      for (const auto& [param, grad] : grads.grads) expect_close(a.at(grad), b.at(grad), param);
    }
}

// Mixed precision: the bfloat16 Cast of the scores' gradient (for the products before the loss)
// folds into the fused loss and gradient (fold_16_bit_casts: out_dtype), directly or through the
// Reshape of a language model's [batch, T, C] logits to rows; the graph's outputs are bit for bit
// those with the Cast. Not when the Reshape's result has another reader.
TEST(LossFusion, MixedPrecisionsCastOfTheScoresGradientFoldsIntoTheLoss) {
  for (const bool reshaped : {false, true}) {
    for (const bool returned : {false, true}) {
      if (returned && !reshaped) continue;
      SCOPED_TRACE(std::string(reshaped ? "through a Reshape" : "direct") + (returned ? ", returned" : ""));
      GraphBuilder b("lm_head", 5);
      const Shape xs = reshaped ? Shape{4, 3, 8} : Shape{12, 8};
      const std::string x = b.input("x", DType::Float32, xs);
      const std::string labels = b.input("labels", DType::Int64, {12});
      std::string scores = b.op("MatMul", {x, b.normal("head", {8, 3000}, 7)});
      if (reshaped) scores = b.op("Reshape", {scores, b.ints("rows", {-1, 3000})});
      const std::string loss =
          b.op("SoftmaxCrossEntropyLoss", {scores, labels},
               {{"reduction", Attribute::of_string("mean")}, {"ignore_index", Attribute::of_int(-100)}});
      b.output(loss, "loss", DType::Float32, {});
      Model forward = b.build();
      infer_shapes(forward);
      GradientGraph grads = build_gradient_graph(forward, {.loss = "loss", .mixed_precision = DType::BFloat16});
      Model m = grads.model;
      forward_identities(m);
      ASSERT_EQ(fuse_loss_with_gradient(m), 1u);
      if (returned) {  // the gradient through the Reshape also returned
        for (const Node& n : m.graph.nodes)
          if (n.op_type == "Reshape" && n.name.find("_Grad") != std::string::npos) {
            ValueInfo v;
            v.name = n.outputs[0];
            m.graph.outputs.push_back(v);
          }
      }
      Model folded = m;
      EXPECT_EQ(fold_16_bit_casts(folded), returned ? 0u : 1u);
      size_t rounding = 0;
      for (const Node& n : folded.graph.nodes)
        rounding += n.op_type == "SoftmaxCrossEntropyLossAndGrad" && n.has_attr("out_dtype");
      EXPECT_EQ(rounding, returned ? 0u : 1u);
      std::map<std::string, Tensor> in{{"x", Tensor::empty(DType::Float32, xs)},
                                       {"labels", Tensor::empty(DType::Int64, {12})}};
      std::mt19937 gen(9);
      std::normal_distribution<float> d(0.f, 1.f);
      for (int64_t i = 0; i < 96; ++i) in.at("x").data<float>()[i] = d(gen);
      for (int64_t i = 0; i < 12; ++i) in.at("labels").data<int64_t>()[i] = i == 5 ? -100 : (i * 251) % 3000;
      const auto want = Session(m, {.fuse = false}).run(in), got = Session(folded, {.fuse = false}).run(in);
      for (const auto& [param, grad] : grads.grads) {
        ASSERT_EQ(got.at(grad).nbytes(), want.at(grad).nbytes()) << param;
        EXPECT_EQ(std::memcmp(got.at(grad).raw_data(), want.at(grad).raw_data(), want.at(grad).nbytes()), 0) << param;
      }
      EXPECT_EQ(got.at("loss").item_as_double(), want.at("loss").item_as_double());
    }
  }
}

TEST(LossFusion, LossesReadBeforeTheirGradientOrWithOtherAttributesStay) {
  // log_prob returned: the gradient builder takes the gradient from it (x_is_log_prob 1).
  {
    Model m = build_gradient_graph(classifier(10, false, true), {.loss = "loss"}).model;
    EXPECT_EQ(fuse_loss_with_gradient(m), 0u);
  }
  const Model base = build_gradient_graph(classifier(10, false, false), {.loss = "loss"}).model;
  auto sce_index = [](const Model& m) {
    for (size_t i = 0; i < m.graph.nodes.size(); ++i)
      if (m.graph.nodes[i].op_type == "SoftmaxCrossEntropyLoss") return i;
    return m.graph.nodes.size();
  };
  {
    Model m = base;
    forward_identities(m);
    EXPECT_EQ(fuse_loss_with_gradient(m), 1u);  // the control: this graph fuses
  }
  {
    // Something in the forward reads the loss: it would run before the fused node wrote it.
    Model m = base;
    forward_identities(m);
    const size_t i = sce_index(m);
    ASSERT_LT(i, m.graph.nodes.size());
    Node early;
    early.name = "early";
    early.op_type = "Neg";
    early.inputs = {m.graph.nodes[i].outputs[0]};
    early.outputs = {"early"};
    m.graph.nodes.insert(m.graph.nodes.begin() + static_cast<std::ptrdiff_t>(i) + 1, early);
    ValueInfo v;
    v.name = "early";
    v.has_type = true;
    m.graph.outputs.push_back(v);
    EXPECT_EQ(fuse_loss_with_gradient(m), 0u);
  }
  {
    // The gradient's ignore_index is not the loss's.
    Model m = base;
    forward_identities(m);
    for (Node& n : m.graph.nodes)
      if (n.op_type == "SoftmaxCrossEntropyLossGrad") n.attrs["ignore_index"] = Attribute::of_int(-1);
    EXPECT_EQ(fuse_loss_with_gradient(m), 0u);
  }
}

// logits = x W over 11 classes, [2, 6, 11]; loss = CE(logits[:, :-1].reshape(-1, 11),
// labels[:, 1:].reshape(-1)) as Hugging Face's causal language models write it. `slice_axis` 2
// slices the classes instead; `reduction` none leaves the loss unreduced; `expose` also returns
// the flattened sliced logits (a second reader: the fold does not apply, the reference).
Model shifted_lm(std::optional<int64_t> ignore, int64_t slice_axis = 1, const std::string& reduction = "mean",
                 bool expose = false, bool computed_rows = false) {
  GraphBuilder b("shifted", 9);
  const std::string x = b.input("x", DType::Float32, {2, 6, 4});
  const std::string labels = b.input("labels", DType::Int64, {2, 6});
  const std::string logits = b.op("MatMul", {x, b.normal("w", {4, 11}, 4)});
  const std::string one = b.ints("one", {1}), zero = b.ints("zero", {0}), minus_one = b.ints("minus_one", {-1});
  const std::string sliced = b.op("Slice", {logits, zero, minus_one, b.ints("axis", {slice_axis}), one});
  const int64_t classes = slice_axis == 2 ? 10 : 11;
  // [-1, 11], or as torch exports view(-1, logits.size(-1)) with dynamic axes: [-1] joined to
  // Gather(Shape(logits), 2).
  std::string target = b.ints("rows", {-1, classes});
  if (computed_rows) {
    const std::string two = b.initializer("two", Tensor::scalar<int64_t>(2));
    const std::string last = b.op("Unsqueeze", {b.op("Gather", {b.op("Shape", {logits}), two}), zero});
    target = b.op("Concat", {b.ints("lead", {-1}), last}, {{"axis", Attribute::of_int(0)}});
  }
  const std::string rows = b.op("Reshape", {sliced, target});
  const int64_t end = std::numeric_limits<int64_t>::max();
  const std::string shifted = slice_axis == 2 ? labels : b.op("Slice", {labels, one, b.ints("end", {end}), one, one});
  const std::string flat = b.op("Reshape", {shifted, b.ints("flat", {-1})});
  std::map<std::string, Attribute> attrs{{"reduction", Attribute::of_string(reduction)}};
  if (ignore) attrs["ignore_index"] = Attribute::of_int(*ignore);
  std::string loss = b.op("SoftmaxCrossEntropyLoss", {rows, flat}, attrs);
  if (reduction == "none") loss = b.op("ReduceMean", {loss}, {{"keepdims", Attribute::of_int(0)}});
  b.output(loss, "loss", DType::Float32, {});
  if (expose) b.output(rows, "rows", DType::Float32, {10, classes});
  Model m = b.build();
  infer_shapes(m);
  return m;
}

std::map<std::string, Tensor> lm_feeds(std::optional<int64_t> ignore) {
  Tensor x = Tensor::empty(DType::Float32, {2, 6, 4});
  std::mt19937 gen(8);
  std::normal_distribution<float> d(0.f, 1.f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = d(gen);
  Tensor labels = Tensor::empty(DType::Int64, {2, 6});
  for (int64_t i = 0; i < 12; ++i) labels.data<int64_t>()[i] = ignore && i % 4 == 3 ? *ignore : (i * 5) % 11;
  return {{"x", x}, {"labels", labels}};
}

// The logits without their hint, as ONNX's inference leaves them behind an attention block's
// computed Reshape: their rank comes from the ops that make them.
Model unshaped_logits(Model m) {
  std::erase_if(m.graph.value_info, [&](const ValueInfo& v) { return v.name == m.graph.nodes.front().outputs[0]; });
  return m;
}

TEST(LossFusion, ShiftedLanguageModelLossesPadTheLabelsInsteadOfSlicingTheLogits) {
  for (bool computed : {false, true})
    for (bool unshaped : {false, true})
      for (std::optional<int64_t> ignore : {std::optional<int64_t>(), std::optional<int64_t>(-100)}) {
        const Model lm = shifted_lm(ignore, 1, "mean", false, computed);
        const Model original = unshaped ? unshaped_logits(lm) : lm;
        ASSERT_EQ(original.graph.nodes.front().op_type, "MatMul");
        Model folded = original;
        EXPECT_EQ(fold_score_slices_into_labels(folded), 1u)
            << "computed rows " << computed << ", unshaped " << unshaped;
        EXPECT_EQ(count(folded, "Slice"), 1u);  // the labels' own
        EXPECT_EQ(count(folded, "Pad"), 1u);
        const auto want = Session(original, {.fuse = false}).run(lm_feeds(ignore)).at("loss");
        const auto got = Session(folded, {.fuse = false}).run(lm_feeds(ignore)).at("loss");
        expect_close(got, want, "loss");
        // The gradient graph, built through the fold, against one the fold cannot apply to.
        const GradientGraph grads = build_gradient_graph(original, {.loss = "loss"});
        const GradientGraph reference =
            build_gradient_graph(shifted_lm(ignore, 1, "mean", true, computed), {.loss = "loss"});
        ASSERT_EQ(count(grads.model, "Pad"), 1u) << "unshaped " << unshaped;
        EXPECT_EQ(count(grads.model, "SliceGrad"), 0u);
        EXPECT_EQ(count(reference.model, "SliceGrad"), 1u);
        const auto a = Session(grads.model).run(lm_feeds(ignore));
        const auto b = Session(reference.model).run(lm_feeds(ignore));
        expect_close(a.at("loss"), b.at("loss"), "loss");
        expect_close(a.at(grads.grads.at("w")), b.at(reference.grads.at("w")), "w");
      }
}

// Rows of 11 over logits of 22 columns: each row of the loss is half a position's logits, which
// padded labels would not line up with; with the logits' hint and without it.
Model half_rows() {
  GraphBuilder b("half", 9);
  const std::string x = b.input("x", DType::Float32, {2, 6, 4});
  const std::string labels = b.input("labels", DType::Int64, {2, 11});
  const std::string logits = b.op("MatMul", {x, b.initializer("w", Tensor::zeros(DType::Float32, {4, 22}))});
  const std::string one = b.ints("one", {1});
  const std::string sliced = b.op("Slice", {logits, b.ints("zero", {0}), b.ints("minus_one", {-1}), one, one});
  const std::string rows = b.op("Reshape", {sliced, b.ints("rows", {-1, 11})});
  const std::string shifted =
      b.op("Slice", {labels, one, b.ints("end", {std::numeric_limits<int64_t>::max()}), one, one});
  const std::string flat = b.op("Reshape", {shifted, b.ints("flat", {-1})});
  b.output(b.op("SoftmaxCrossEntropyLoss", {rows, flat}), "loss", DType::Float32, {});
  Model m = b.build();
  infer_shapes(m);
  return m;
}

TEST(LossFusion, SlicesOfTheClassesUnreducedLossesAndPartRowsStay) {
  for (bool unshaped : {false, true}) {
    Model halves = unshaped ? unshaped_logits(half_rows()) : half_rows();
    EXPECT_EQ(fold_score_slices_into_labels(halves), 0u) << "unshaped " << unshaped;
  }
  Model classes = shifted_lm(std::nullopt, 2);
  EXPECT_EQ(fold_score_slices_into_labels(classes), 0u);
  Model unreduced = shifted_lm(std::nullopt, 1, "none");
  EXPECT_EQ(fold_score_slices_into_labels(unreduced), 0u);
}

}  // namespace
}  // namespace kiln

// Gradient rules are keyed by opset range, as kernels are: the lookup takes the node's opset, and a
// node at an opset without a rule is an Unsupported error naming the op, domain, opset and the
// ranges that have one.
#include "autodiff/registry.h"

#include <gtest/gtest.h>

#include "graph_builder.h"
#include "kiln/autodiff.h"
#include "test_util.h"

namespace kiln {
namespace {

TEST(GradientRegistry, LookupPicksTheRangeHoldingTheOpset) {
  GradientRegistry r;
  int used = 0;
  r.add(
      {"test.kiln", "Versioned", 1, 12}, [&](GradContext&) { used = 1; }, "autodiff/a.cpp");
  r.add(
      {"test.kiln", "Versioned", 13, kMaxOpset}, [&](GradContext&) { used = 2; }, "autodiff/b.cpp");
  r.add({"test.kiln", "Marked", 5, 7}, nullptr, "autodiff/c.cpp");
  EXPECT_EQ(r.find("test.kiln", "Versioned", 0), nullptr);
  ASSERT_NE(r.find("test.kiln", "Versioned", 1), nullptr);
  EXPECT_EQ(r.find("test.kiln", "Versioned", 12)->file, "autodiff/a.cpp");
  EXPECT_EQ(r.find("test.kiln", "Versioned", 13)->file, "autodiff/b.cpp");
  EXPECT_EQ(r.find("test.kiln", "Versioned", 1000)->file, "autodiff/b.cpp");
  EXPECT_EQ(r.find("", "Versioned", 13), nullptr);  // the domain is part of the key
  EXPECT_FALSE(r.find("test.kiln", "Versioned", 13)->no_gradient());
  EXPECT_EQ(r.find("test.kiln", "Marked", 4), nullptr);
  EXPECT_TRUE(r.find("test.kiln", "Marked", 6)->no_gradient());
  EXPECT_EQ(r.find("test.kiln", "Marked", 8), nullptr);
  EXPECT_EQ(r.ranges("test.kiln", "Versioned"), "1-12, 13+");
  EXPECT_EQ(r.ranges("test.kiln", "Marked"), "5-7");
  EXPECT_EQ(r.ranges("test.kiln", "Absent"), "");
  EXPECT_EQ(GradientDef("", "X", 4, 4).range(), "4");
}

TEST(GradientRegistry, RegistrationsRecordTheirFileAndGradientKindTakesTheOpset) {
  const GradientEntry* softmax = GradientRegistry::global().find("", "Softmax", 13);
  ASSERT_NE(softmax, nullptr);
  EXPECT_TRUE(std::string(softmax->file).ends_with("autodiff/softmax.cpp")) << softmax->file;
  EXPECT_EQ(gradient_kind("", "Softmax", 12), GradientKind::None);
  EXPECT_EQ(gradient_kind("", "Softmax", 13), GradientKind::Rule);
  EXPECT_EQ(gradient_kind("", "Softmax"), GradientKind::Rule);  // the newest opset
  EXPECT_EQ(gradient_kind("", "Shape", 1), GradientKind::NoGradient);
  EXPECT_EQ(gradient_kind("", "Frobnicate", 17), GradientKind::None);
}

// loss = ReduceSum(Softmax(w)) at the given opset (Softmax's rule covers opsets 13+).
Model softmax_model(int64_t opset) {
  GraphBuilder b("softmax", 1, opset);
  b.initializer("w", Tensor::from_vector<float>({1, 3}, {1, 2, 3}));
  const std::string y = b.op("Softmax", {"w"}, {{"axis", Attribute::of_int(1)}}, "sm");
  b.output(b.op("ReduceSum", {y}, {{"keepdims", Attribute::of_int(0)}}), "loss", DType::Float32, {});
  return b.build();
}

TEST(GradientRegistry, BuilderNamesTheOpsetsThatHaveARule) {
  EXPECT_NO_THROW(build_gradient_graph(softmax_model(13), {.loss = "loss"}));
  test::expect_error<Unsupported>([] { build_gradient_graph(softmax_model(12), {.loss = "loss"}); },
                                  {"node 'sm' (Softmax) is on the path from parameter 'w' to loss 'loss'",
                                   "no gradient for op Softmax (domain ai.onnx) at opset 12; its gradient rules "
                                   "cover opsets 13+; freeze 'w'"});
}

}  // namespace
}  // namespace kiln

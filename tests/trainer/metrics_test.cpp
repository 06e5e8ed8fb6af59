// Metrics (include/kiln/metrics.h) on small cases computed by hand, and MetricsDump, the Kiln side
// of tests/python/test_metrics.py (which compares with scikit-learn).
#include "kiln/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kiln/error.h"
#include "kiln/npy.h"
#include "test_util.h"

namespace kiln::trainer {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using kiln::test::expect_error;

constexpr double kTol = 1e-15;  // hand cases are exact up to one rounding

Tensor ids(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_vector<int64_t>({n}, v);
}

TEST(Metrics, AccuracyFromLogitsTakesTheFirstMaximum) {
  const Tensor logits = Tensor::from_vector<float>({3, 2}, {0.1f, 0.9f, 0.8f, 0.2f, 0.5f, 0.5f});
  EXPECT_NEAR(accuracy(logits, ids({1, 1, 0})), 2.0 / 3.0, kTol);  // row 3 ties: class 0
  EXPECT_NEAR(accuracy(logits, ids({1, 1, 1})), 1.0 / 3.0, kTol);
}

TEST(Metrics, AccuracyFromClassIdsOfAnyIntegerOrIntegralFloatType) {
  const Tensor pred32 = Tensor::from_vector<int32_t>({4}, {0, 1, 2, 2});
  EXPECT_DOUBLE_EQ(accuracy(pred32, ids({0, 2, 2, 1})), 0.5);
  const Tensor pred_f = Tensor::from_vector<double>({4}, {0, 1, 2, 2});
  const Tensor labels_f = Tensor::from_vector<float>({4}, {0, 1, 2, 1});
  EXPECT_DOUBLE_EQ(accuracy(pred_f, labels_f), 0.75);
}

TEST(Metrics, TopKTiesRankTheHigherClassFirstAsSklearn) {
  const Tensor scores = Tensor::from_vector<float>({1, 4}, {1, 2, 2, 0});
  EXPECT_EQ(top_k_accuracy(scores, ids({1}), 1), 0.0);  // class 2 ties with 1 and ranks above it
  EXPECT_EQ(top_k_accuracy(scores, ids({1}), 2), 1.0);
  EXPECT_EQ(top_k_accuracy(scores, ids({2}), 1), 1.0);
  EXPECT_EQ(top_k_accuracy(scores, ids({0}), 2), 0.0);
  EXPECT_EQ(top_k_accuracy(scores, ids({0}), 3), 1.0);
  EXPECT_EQ(top_k_accuracy(scores, ids({3}), 4), 1.0);  // k >= C: every sample
  EXPECT_EQ(top_k_accuracy(scores, ids({3}), 9), 1.0);
}

TEST(Metrics, TopKOnSeveralRows) {
  const Tensor scores = Tensor::from_vector<double>({3, 3}, {0.1, 0.5, 0.4, 0.3, 0.3, 0.4, 0.9, 0.05, 0.05});
  // label 2 is second in row 0; label 0 is third in row 1 (0.3 tie: class 1 first); label 1 is
  // second in row 2 (tie with class 2, which ranks first).
  EXPECT_NEAR(top_k_accuracy(scores, ids({2, 0, 1}), 1), 0.0, kTol);
  EXPECT_NEAR(top_k_accuracy(scores, ids({2, 0, 1}), 2), 1.0 / 3.0, kTol);
  EXPECT_NEAR(top_k_accuracy(scores, ids({2, 0, 2}), 2), 2.0 / 3.0, kTol);
}

TEST(Metrics, TopKBinaryScoresUseSklearnsThreshold) {
  const Tensor probs = Tensor::from_vector<float>({3}, {0.2f, 0.7f, 0.5f});
  EXPECT_NEAR(top_k_accuracy(probs, ids({0, 1, 1}), 1), 2.0 / 3.0, kTol);  // 0.5 is not > 0.5
  const Tensor decision = Tensor::from_vector<float>({3}, {-1.0f, 2.0f, 0.5f});
  EXPECT_NEAR(top_k_accuracy(decision, ids({0, 1, 0}), 1), 2.0 / 3.0, kTol);  // threshold 0
  EXPECT_EQ(top_k_accuracy(decision, ids({1, 0, 0}), 2), 1.0);
}

// y_true [0,0,1,2,2,2], y_pred [0,1,1,2,0,3]: class 3 is only predicted (recall 0/0 -> 0).
// per class P = .5 .5 1 0, R = .5 1 1/3 0, F = .5 2/3 .5 0, support 2 1 3 0.
TEST(Metrics, PrecisionRecallF1EachAverage) {
  const Tensor pred = ids({0, 1, 1, 2, 0, 3}), labels = ids({0, 0, 1, 2, 2, 2});
  const auto micro = precision_recall_f1(pred, labels, "micro");
  EXPECT_NEAR(micro.precision, 0.5, kTol);
  EXPECT_NEAR(micro.recall, 0.5, kTol);
  EXPECT_NEAR(micro.f1, 0.5, kTol);
  const auto macro = precision_recall_f1(pred, labels, "macro");
  EXPECT_NEAR(macro.precision, 0.5, kTol);
  EXPECT_NEAR(macro.recall, 11.0 / 24.0, kTol);
  EXPECT_NEAR(macro.f1, 5.0 / 12.0, kTol);
  const auto weighted = precision_recall_f1(pred, labels, "weighted");
  EXPECT_NEAR(weighted.precision, 0.75, kTol);
  EXPECT_NEAR(weighted.recall, 0.5, kTol);
  EXPECT_NEAR(weighted.f1, 19.0 / 36.0, kTol);
}

TEST(Metrics, ZeroDivisionCountsZero) {
  // class 1 is never predicted: its precision is 0/0 -> 0, and F1 is 0 since P + R = 0.
  const auto macro = precision_recall_f1(ids({0, 0}), ids({0, 1}), "macro");
  EXPECT_NEAR(macro.precision, 0.25, kTol);
  EXPECT_NEAR(macro.recall, 0.5, kTol);
  EXPECT_NEAR(macro.f1, 1.0 / 3.0, kTol);
  // logits give the same answer as the ids they argmax to
  const Tensor logits = Tensor::from_vector<float>({2, 2}, {3, 1, 2, -1});
  const auto from_logits = precision_recall_f1(logits, ids({0, 1}), "macro");
  EXPECT_EQ(from_logits.f1, macro.f1);
}

TEST(Metrics, RegressionSingleOutput) {
  const Tensor pred = Tensor::from_vector<float>({3}, {1, 2, 3});
  const Tensor ones = Tensor::from_vector<float>({3}, {1, 1, 1});
  EXPECT_NEAR(mean_squared_error(pred, ones), 5.0 / 3.0, kTol);
  EXPECT_NEAR(mean_absolute_error(pred, ones), 1.0, kTol);
  EXPECT_EQ(r2_score(pred, ones), 0.0);  // constant targets, not predicted: force_finite 0
  EXPECT_EQ(r2_score(ones, ones), 1.0);  // constant targets predicted exactly: 1
  const Tensor targets = Tensor::from_vector<double>({3}, {1, 2, 3});
  EXPECT_NEAR(r2_score(Tensor::from_vector<double>({3}, {1, 2, 4}), targets), 0.5, kTol);
  EXPECT_TRUE(std::isnan(r2_score(Tensor::from_vector<double>({1}, {1}), Tensor::from_vector<double>({1}, {2}))));
  // [N, 1] predictions against [N] targets, as a regression head gives them
  EXPECT_NEAR(mean_squared_error(pred.reshape({3, 1}), ones), 5.0 / 3.0, kTol);
}

TEST(Metrics, RegressionAveragesOutputsUniformly) {
  const Tensor pred = Tensor::from_vector<double>({3, 2}, {1, 0, 2, 0, 3, 0});
  const Tensor targets = Tensor::from_vector<double>({3, 2}, {1, 1, 2, 1, 4, 1});
  EXPECT_NEAR(mean_squared_error(pred, targets), (1.0 / 3.0 + 1.0) / 2, kTol);
  EXPECT_NEAR(mean_absolute_error(pred, targets), (1.0 / 3.0 + 1.0) / 2, kTol);
  // output 0: 1 - 1 / (14/3) = 11/14; output 1: constant targets, mispredicted: 0
  EXPECT_NEAR(r2_score(pred, targets), 11.0 / 28.0, kTol);
}

TEST(Metrics, Perplexity) {
  EXPECT_NEAR(perplexity(std::log(20.0)), 20.0, 1e-13);
  EXPECT_EQ(perplexity(0.0), 1.0);
  EXPECT_TRUE(std::isinf(perplexity(1e6)));
}

TEST(Metrics, ErrorsNameTheShapesAndOptions) {
  const Tensor logits = Tensor::from_vector<float>({2, 3}, {0, 1, 2, 3, 4, 5});
  expect_error<ShapeError>([&] { accuracy(logits, ids({0, 1, 2})); }, {"float[2, 3]", "int64[3]"});
  EXPECT_THROW(mean_squared_error(Tensor::from_vector<float>({3, 2}, {0, 0, 0, 0, 0, 0}), ids({1, 2, 3})), ShapeError);
  EXPECT_THROW(top_k_accuracy(logits, ids({0, 1}).reshape({1, 2}), 1), ShapeError);
  EXPECT_THROW(accuracy(Tensor::zeros(DType::Float32, {0, 3}), Tensor::zeros(DType::Int64, {0})), InvalidArgument);
  EXPECT_THROW(r2_score(Tensor::zeros(DType::Float32, {0}), Tensor::zeros(DType::Float32, {0})), InvalidArgument);
  expect_error<InvalidArgument>([&] { precision_recall_f1(logits, ids({0, 1}), "binary"); }, "'binary'");
  EXPECT_THROW(precision_recall_f1(logits, ids({0, 1}), "samples"), InvalidArgument);
  EXPECT_THROW(accuracy(logits, Tensor::from_vector<float>({2}, {0.5f, 1})), InvalidArgument);
  EXPECT_THROW(top_k_accuracy(logits, ids({0, 1}), 0), InvalidArgument);
  EXPECT_THROW(top_k_accuracy(logits, ids({0, 3}), 1), InvalidArgument);  // label outside the columns
}

TEST(Metrics, ClassificationMetricsForTheTrainer) {
  const ComputeMetrics cm = classification_metrics({"accuracy", "f1_macro", "precision_weighted", "top2_accuracy"});
  EvalPrediction e{Tensor::from_vector<float>({3, 3}, {0.1f, 0.5f, 0.4f, 0.3f, 0.3f, 0.4f, 0.9f, 0.05f, 0.05f}),
                   ids({1, 0, 1})};
  const Metrics m = cm(e);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_NEAR(m.at("accuracy"), 1.0 / 3.0, kTol);  // argmax 1, 2, 0
  // rows 2 and 3 rank their label third (ties go to the higher class), so top-2 only hits row 1
  EXPECT_NEAR(m.at("top2_accuracy"), 1.0 / 3.0, kTol);
  EXPECT_EQ(m.at("f1_macro"), precision_recall_f1(e.predictions, e.label_ids, "macro").f1);
  EXPECT_EQ(m.at("precision_weighted"), precision_recall_f1(e.predictions, e.label_ids, "weighted").precision);
  const Metrics r = classification_metrics({"mse", "r2"})(
      EvalPrediction{Tensor::from_vector<float>({3, 1}, {1, 2, 4}), Tensor::from_vector<float>({3}, {1, 2, 3})});
  EXPECT_NEAR(r.at("mse"), 1.0 / 3.0, kTol);
  EXPECT_NEAR(r.at("r2"), 0.5, kTol);
}

TEST(Metrics, UnknownMetricNameListsTheValidOnes) {
  expect_error<InvalidArgument>(
      [] {
        classification_metrics({"accuracy", "f1_binary"});
      },
      {"'f1_binary'", "f1_weighted", "top<k>_accuracy"});
  EXPECT_THROW(classification_metrics({"top0_accuracy"}), InvalidArgument);
  EXPECT_THROW(classification_metrics({"topx_accuracy"}), InvalidArgument);
  EXPECT_THROW(classification_metrics({}), InvalidArgument);
  // top-k on class ids (no scores) is a ShapeError at evaluation
  EXPECT_THROW(classification_metrics({"top1_accuracy"})(EvalPrediction{ids({0, 1}), ids({0, 1})}), ShapeError);
}

// ---- MetricsDump: with KILN_METRICS_DUMP=<dir>, reads <dir>/request.json
//   {"cases": [{"metric": "accuracy" | "top_k" | "prf" | "mse" | "mae" | "r2" | "perplexity",
//               "predictions": "p.npy", "labels": "l.npy", "k": 3, "average": "macro", "loss": x}]}
// and writes <dir>/response.json {"results": [{"value": x} | {"precision", "recall", "f1"} |
// {"error": message}]} (non-finite values as "nan" / "inf"). Without the variable it runs a small
// request of its own and checks the answers by hand.

Json number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

Json run_case(const fs::path& dir, const Json& c) {
  try {
    const std::string metric = c.at("metric").get<std::string>();
    if (metric == "perplexity") return {{"value", number(perplexity(c.at("loss").get<double>()))}};
    const Tensor p = load_npy((dir / c.at("predictions").get<std::string>()).string());
    const Tensor l = load_npy((dir / c.at("labels").get<std::string>()).string());
    if (metric == "accuracy") return {{"value", number(accuracy(p, l))}};
    if (metric == "top_k") return {{"value", number(top_k_accuracy(p, l, c.at("k").get<int64_t>()))}};
    if (metric == "mse") return {{"value", number(mean_squared_error(p, l))}};
    if (metric == "mae") return {{"value", number(mean_absolute_error(p, l))}};
    if (metric == "r2") return {{"value", number(r2_score(p, l))}};
    if (metric == "prf") {
      const auto r = precision_recall_f1(p, l, c.at("average").get<std::string>());
      return {{"precision", number(r.precision)}, {"recall", number(r.recall)}, {"f1", number(r.f1)}};
    }
    throw InvalidArgument("request: unknown metric " + metric);
  } catch (const std::exception& e) {
    return {{"error", e.what()}};
  }
}

Json run_request(const fs::path& dir) {
  std::ifstream in(dir / "request.json");
  if (!in) throw IOError("cannot read " + (dir / "request.json").string());
  const Json request = Json::parse(in);
  Json results = Json::array();
  for (const Json& c : request.at("cases")) results.push_back(run_case(dir, c));
  Json response = {{"results", results}};
  std::ofstream(dir / "response.json") << response.dump();
  return response;
}

TEST(MetricsDump, Request) {
  if (const char* env = std::getenv("KILN_METRICS_DUMP"); env && *env) {
    const Json response = run_request(env);
    EXPECT_TRUE(fs::exists(fs::path(env) / "response.json"));
    EXPECT_FALSE(response.at("results").empty());
    return;
  }
  const kiln::test::TempDir tmp;
  const fs::path& dir = tmp.path();
  save_npy(ids({0, 1, 1, 2, 0, 3}), (dir / "p.npy").string());
  save_npy(ids({0, 0, 1, 2, 2, 2}), (dir / "l.npy").string());
  save_npy(Tensor::from_vector<float>({1, 4}, {1, 2, 2, 0}), (dir / "s.npy").string());
  save_npy(ids({1}), (dir / "t.npy").string());
  std::ofstream(dir / "request.json") << Json{
      {"cases",
       {{{"metric", "prf"}, {"predictions", "p.npy"}, {"labels", "l.npy"}, {"average", "weighted"}},
        {{"metric", "accuracy"}, {"predictions", "p.npy"}, {"labels", "l.npy"}},
        {{"metric", "top_k"}, {"predictions", "s.npy"}, {"labels", "t.npy"}, {"k", 2}},
        {{"metric", "r2"}, {"predictions", "p.npy"}, {"labels", "t.npy"}},
        {{"metric", "perplexity"},
         {"loss", 1e6}}}}}.dump();
  const Json r = run_request(dir).at("results");
  ASSERT_EQ(r.size(), 5u);
  EXPECT_NEAR(r[0].at("precision").get<double>(), 0.75, kTol);
  EXPECT_NEAR(r[0].at("f1").get<double>(), 19.0 / 36.0, kTol);
  EXPECT_NEAR(r[1].at("value").get<double>(), 0.5, kTol);
  EXPECT_EQ(r[2].at("value").get<double>(), 1.0);
  EXPECT_NE(r[3].at("error").get<std::string>().find("int64[6]"), std::string::npos);  // shapes disagree
  EXPECT_EQ(r[4].at("value"), "inf");
}

}  // namespace
}  // namespace kiln::trainer

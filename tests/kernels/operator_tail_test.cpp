// The rest of ONNX's operator set beyond ONNX's own node cases: TfIdfVectorizer's IDF and TFIDF
// modes, NonMaxSuppression's thresholds, Det's values, GridSample's non-finite grid points, and the
// errors of NonMaxSuppression, MaxUnpool, ReverseSequence, GridSample, RoiAlign, DFT, STFT and
// MelWeightMatrix. Values are checked against ONNX's node cases (conformance) and, for the
// gradients, finite differences and torch (tests/autodiff, tests/python).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

Attribute a_int(int64_t v) { return Attribute::of_int(v); }
Attribute a_ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

Node tfidf(const std::string& mode, std::vector<float> weights) {
  std::map<std::string, Attribute> a{{"min_gram_length", a_int(1)},        {"max_gram_length", a_int(2)},
                                     {"max_skip_count", a_int(0)},         {"mode", Attribute::of_string(mode)},
                                     {"ngram_counts", a_ints({0, 2})},     {"ngram_indexes", a_ints({2, 0, 1})},
                                     {"pool_int64s", a_ints({4, 5, 4, 5})}};  // 1-grams 4, 5; 2-gram (4, 5)
  if (!weights.empty()) a["weights"] = Attribute::of_floats(std::move(weights));
  return make_node("TfIdfVectorizer", 1, a);
}

TEST(OperatorTail, TfIdfModes) {
  const Tensor x = Tensor::from_vector<int64_t>({2, 5}, {4, 5, 4, 5, 4, 7, 7, 5, 7, 7});
  // Output slots hold (5, (4, 5), 4): counts row 0 (2, 2, 3), row 1 (1, 0, 0). Weights are in pool
  // order: 4 -> 0.5, 5 -> 2, (4, 5) -> 3.
  EXPECT_EQ(as_doubles(run1(tfidf("TF", {}), {x})), (std::vector<double>{2, 2, 3, 1, 0, 0}));
  EXPECT_EQ(as_doubles(run1(tfidf("IDF", {0.5f, 2.0f, 3.0f}), {x})), (std::vector<double>{2, 3, 0.5, 2, 0, 0}));
  EXPECT_EQ(as_doubles(run1(tfidf("TFIDF", {0.5f, 2.0f, 3.0f}), {x})), (std::vector<double>{4, 6, 1.5, 2, 0, 0}));
  Node bad = tfidf("TF", {});
  bad.attrs["ngram_counts"] = a_ints({0, 3});
  expect_error<InvalidModel>([&] { run_node(bad, {x}); }, "do not cut pool_int64s (4 values) into whole 2-grams");
  expect_error<Unsupported>([&] { run_node(tfidf("TF", {}), {Tensor::zeros(DType::Float32, {3})}); },
                            "has no kernel for opset 17 and dtype float");
}

TEST(OperatorTail, NonMaxSuppressionThresholdsAndErrors) {
  // Three boxes in center format; box 1 overlaps box 0 (IoU 0.6), box 2 is apart.
  const Tensor boxes = Tensor::from_vector<float>({1, 3, 4}, {0, 0, 2, 2, 0.5f, 0, 2, 2, 10, 10, 2, 2});
  const Tensor scores = Tensor::from_vector<float>({1, 1, 3}, {0.9f, 0.8f, 0.1f});
  const Node nms = make_node("NonMaxSuppression", 5, {{"center_point_box", a_int(1)}});
  const auto run = [&](float iou, float score) {
    return run1(nms,
                {boxes, scores, Tensor::scalar<int64_t>(3), Tensor::scalar<float>(iou), Tensor::scalar<float>(score)})
        .to_int64_vector();
  };
  EXPECT_EQ(run(0.5f, 0.0f), (std::vector<int64_t>{0, 0, 0, 0, 0, 2}));           // box 1 suppressed
  EXPECT_EQ(run(0.7f, 0.0f), (std::vector<int64_t>{0, 0, 0, 0, 0, 1, 0, 0, 2}));  // kept below the threshold
  EXPECT_EQ(run(0.7f, 0.5f), (std::vector<int64_t>{0, 0, 0, 0, 0, 1}));           // box 2 under score_threshold
  expect_error<ShapeError>(
      [&] {
        run_node(nms, {boxes, Tensor::from_vector<float>({1, 1, 2}, {1, 2})});
      },
      "must be [batch, boxes, 4]");
  expect_error<InvalidModel>(
      [&] {
        run_node(nms, {boxes, scores, Tensor::scalar<int64_t>(3), Tensor::scalar<float>(1.5f)});
      },
      "iou_threshold = 1.5 must be in [0, 1]");
}

TEST(OperatorTail, DetValues) {
  const Tensor x = Tensor::from_vector<double>({2, 2, 2}, {1, 2, 3, 4, 2, 4, 1, 2});
  EXPECT_EQ(as_doubles(run1(make_node("Det", 1), {x})), (std::vector<double>{-2, 0}));
  const Tensor p = Tensor::from_vector<double>({3, 3}, {0, 2, 1, 1, 0, 0, 0, 0, 3});  // needs a pivot swap
  EXPECT_DOUBLE_EQ(as_doubles(run1(make_node("Det", 1), {p}))[0], -6);
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("Det", 1), {Tensor::zeros(DType::Float32, {2, 3})});
      },
      "must be [..., n, n]");
}

TEST(OperatorTail, ErrorsNameTheProblem) {
  const Node unpool = make_node("MaxUnpool", 2, {{"kernel_shape", a_ints({2, 2})}, {"strides", a_ints({2, 2})}});
  expect_error<InvalidModel>(
      [&] {
        run_node(unpool,
                 {Tensor::zeros(DType::Float32, {1, 1, 1, 1}), Tensor::from_vector<int64_t>({1, 1, 1, 1}, {4})});
      },
      "index I[0] = 4 is outside the unpooled shape [1, 1, 2, 2]");
  expect_error<InvalidModel>(
      [&] {
        run_node(make_node("ReverseSequence", 2),
                 {Tensor::zeros(DType::Float32, {3, 2}), Tensor::from_vector<int64_t>({2}, {1, 4})});
      },
      "sequence_lens[1] = 4 is outside [0, 3]");
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("GridSample", 2),
                 {Tensor::zeros(DType::Float32, {1, 1, 4, 4}), Tensor::zeros(DType::Float32, {1, 2, 2, 3})});
      },
      "grid float[1, 2, 2, 3] [N, H_out, W_out, 2]");
  // Grid points that are NaN, infinite or absurdly far sample nothing (0), in every padding mode;
  // the finite one reads its pixel.
  for (const char* padding : {"zeros", "border", "reflection"}) {
    const Tensor grid = Tensor::from_vector<float>({1, 1, 4, 2}, {NAN, 0, 0, INFINITY, 1e30f, 0, -1, -1});
    const Tensor x = Tensor::from_vector<float>({1, 1, 2, 2}, {5, 6, 7, 8});
    EXPECT_EQ(as_doubles(run1(make_node("GridSample", 2,
                                        {{"padding_mode", Attribute::of_string(padding)}, {"align_corners", a_int(1)}}),
                              {x, grid})),
              (std::vector<double>{0, 0, 0, 5}))
        << padding;
  }
  expect_error<InvalidModel>(
      [&] {
        run_node(make_node("GridSample", 2, {{"mode", Attribute::of_string("area")}}),
                 {Tensor::zeros(DType::Float32, {1, 1, 4, 4}), Tensor::zeros(DType::Float32, {1, 2, 2, 2})});
      },
      "mode 'area'");
  expect_error<InvalidModel>(
      [&] {
        run_node(make_node("RoiAlign", 3),
                 {Tensor::zeros(DType::Float32, {1, 1, 4, 4}), Tensor::zeros(DType::Float32, {1, 4}),
                  Tensor::from_vector<int64_t>({1}, {2})});
      },
      "batch_indices[0] = 2 is outside [0, 1)");
  expect_error<InvalidModel>(
      [&] {
        run_node(make_node("RoiAlign", 3),
                 {Tensor::zeros(DType::Float32, {1, 1, 4, 4}), Tensor::from_vector<float>({1, 4}, {0, NAN, 2, 2}),
                  Tensor::from_vector<int64_t>({1}, {0})});
      },
      "RoiAlign: rois[0] = (0, nan, 2, 2) has a corner that is not a pixel position");
  expect_error<InvalidModel>(
      [&] {
        run_node(make_node("DFT", 1, {{"onesided", a_int(1)}}), {Tensor::zeros(DType::Float32, {1, 4, 2})});
      },
      "onesided needs a real input");
  expect_error<InvalidModel>(
      [&] {
        run_node(make_node("STFT", 4), {Tensor::zeros(DType::Float32, {1, 8, 1}), Tensor::scalar<int64_t>(2), Tensor(),
                                        Tensor::scalar<int64_t>(16)});
      },
      "the frame no longer than the signal");
  expect_error<ShapeError>(
      [&] {
        run_node(make_node("Upsample", 2),
                 {Tensor::zeros(DType::Float32, {1, 1, 2, 2}), Tensor::from_vector<float>({2}, {2, 2})}, 9);
      },
      "scales float[2] must have one value per dim of X float[1, 1, 2, 2]");
  expect_error<InvalidModel>(
      [&] {
        run_node(make_node("MelWeightMatrix", 5),
                 {Tensor::scalar<int64_t>(4), Tensor::scalar<int64_t>(16), Tensor::scalar<int64_t>(100),
                  Tensor::scalar<float>(0.0f), Tensor::scalar<float>(400.0f)});
      },
      "upper_edge_hertz 400 above sample_rate / 2?");
}

}  // namespace
}  // namespace kiln

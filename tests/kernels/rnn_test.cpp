// RNN, GRU and LSTM: a hand-computed step, and the errors for bad attributes, shapes, dtypes and
// sequence lengths. Their values are checked against ONNX's node cases (conformance), torch.nn
// (tests/python/test_recurrent.py) and, for the gradients, finite differences
// (tests/autodiff/rnn_rules_test.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using namespace test_util;
using kiln::test::expect_error;

Node rnn(const std::string& op, size_t inputs, std::map<std::string, Attribute> attrs, size_t outputs = 2) {
  Node n = make_node(op, inputs, std::move(attrs), outputs);
  n.name = "rec";
  return n;
}

Tensor f32(Shape s, std::vector<float> v) { return Tensor::from_vector<float>(std::move(s), std::move(v)); }

// One step, one unit by hand: h1 = tanh(x w + h0 r + wb + rb).
TEST(Recurrent, RnnStepByHand) {
  const auto out = run_node(rnn("RNN", 6, {{"hidden_size", Attribute::of_int(1)}}),
                            {f32({2, 1, 1}, {0.5f, -1.0f}), f32({1, 1, 1}, {0.8f}), f32({1, 1, 1}, {-0.3f}),
                             f32({1, 2}, {0.1f, 0.05f}), Tensor(), f32({1, 1, 1}, {0.4f})});
  const double h1 = std::tanh(0.5 * 0.8 + 0.4 * -0.3 + 0.15), h2 = std::tanh(-1.0 * 0.8 + h1 * -0.3 + 0.15);
  ASSERT_EQ(out[0].shape(), (Shape{2, 1, 1, 1}));
  EXPECT_NEAR(out[0].data<float>()[0], h1, 1e-6);
  EXPECT_NEAR(out[0].data<float>()[1], h2, 1e-6);
  EXPECT_NEAR(out[1].data<float>()[0], h2, 1e-6);
}

// A row whose length is 1 of 2 keeps its state after step 0 and writes zeros to Y at step 1.
TEST(Recurrent, SequenceLengthsStopRows) {
  const auto out = run_node(rnn("GRU", 5, {{"hidden_size", Attribute::of_int(1)}}),
                            {f32({2, 2, 1}, {0.5f, 0.5f, -1.0f, -1.0f}), f32({1, 3, 1}, {0.8f, 0.2f, -0.6f}),
                             f32({1, 3, 1}, {-0.3f, 0.4f, 0.9f}), Tensor(), Tensor::from_vector<int32_t>({2}, {2, 1})});
  const float* y = out[0].data<float>();  // [S=2, 1, B=2, 1]
  EXPECT_FLOAT_EQ(y[0], y[1]);            // both rows agree at step 0
  EXPECT_EQ(y[3], 0.0f);                  // row 1 has stopped
  EXPECT_NE(y[2], y[0]);
  EXPECT_FLOAT_EQ(out[1].data<float>()[1], y[1]);  // its Y_h is its step-0 state
}

// Empty batches and sequences: empty outputs, and Y_h the initial state (zeros when none) for a
// sequence of no steps or rows of length 0; hidden_size read from R when the attribute is absent.
TEST(Recurrent, EmptyBatchesSequencesAndLengths) {
  const Tensor w = Tensor::zeros(DType::Float32, {1, 15, 4}), r = Tensor::zeros(DType::Float32, {1, 15, 5});
  auto out = run_node(rnn("GRU", 3, {}), {Tensor::zeros(DType::Float32, {3, 0, 4}), w, r});
  EXPECT_EQ(out[0].shape(), (Shape{3, 1, 0, 5}));
  EXPECT_EQ(out[1].shape(), (Shape{1, 0, 5}));
  const Tensor h0 = Tensor::from_vector<float>({1, 2, 5}, std::vector<float>(10, 0.25f));
  out = run_node(rnn("GRU", 6, {}), {Tensor::zeros(DType::Float32, {0, 2, 4}), w, r, Tensor(), Tensor(), h0});
  EXPECT_EQ(out[0].shape(), (Shape{0, 1, 2, 5}));
  EXPECT_EQ(as_doubles(out[1]), as_doubles(h0));
  out = run_node(rnn("GRU", 6, {}), {Tensor::from_vector<float>({3, 2, 4}, std::vector<float>(24, 1.0f)), w, r,
                                     Tensor(), Tensor::from_vector<int32_t>({2}, {0, 0}), h0});
  EXPECT_EQ(as_doubles(out[1]), as_doubles(h0));
  for (double v : as_doubles(out[0])) EXPECT_EQ(v, 0.0);
}

// Float32 over enough steps and wide enough states that the recurrent weights are packed once
// (PackedProduct) for the forward's H_prev R^T and the backward's dA R, against the same layers in
// float64 (never packed): RNN, GRU both ways (without linear_before_reset its recurrent product
// is the first 2H of 3H columns), a bidirectional LSTM with sequence lengths; outputs, and every
// gradient of the ai.kiln.*Grad kernels, within 2e-5 of the largest value.
Tensor to_f64(const Tensor& t) {
  if (!t.defined()) return t;
  return Tensor::from_vector<double>(t.shape(), as_doubles(t));
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = as_doubles(got), w = as_doubles(want);
  double scale = 1e-30;
  for (double v : w) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(g[i], w[i], 2e-5 * scale) << what << " at " << i;
}

void check_packed_against_float64(const std::string& op, int64_t gates, std::map<std::string, Attribute> attrs,
                                  bool lstm) {
  const int64_t S = 9, B = 6, I = 16, H = 64, dirs = attrs.count("direction") ? 2 : 1;
  attrs["hidden_size"] = Attribute::of_int(H);
  std::vector<Tensor> in = {random_f32({S, B, I}, 1, -1.f, 1.f),
                            random_f32({dirs, gates * H, I}, 2, -0.2f, 0.2f),
                            random_f32({dirs, gates * H, H}, 3, -0.2f, 0.2f),
                            random_f32({dirs, 2 * gates * H}, 4, -0.2f, 0.2f),
                            Tensor::from_vector<int32_t>({B}, {9, 9, 7, 5, 9, 4}),
                            random_f32({dirs, B, H}, 5, -0.5f, 0.5f)};
  if (lstm) {
    in.push_back(random_f32({dirs, B, H}, 6, -0.5f, 0.5f));
    in.push_back(random_f32({dirs, 3 * H}, 7, -0.2f, 0.2f));
  }
  const size_t outs = lstm ? 3 : 2;
  std::vector<Tensor> in64;
  for (const Tensor& t : in) in64.push_back(t.defined() && t.dtype() == DType::Float32 ? to_f64(t) : t);
  const auto y32 = run_node(rnn(op, in.size(), attrs, outs), in);
  const auto y64 = run_node(rnn(op, in.size(), attrs, outs), in64);
  for (size_t k = 0; k < outs; ++k) expect_close(y32[k], y64[k], op + " output " + std::to_string(k));
  // The gradients, for random output gradients.
  Node grad = make_node(op + "Grad", in.size() + outs, attrs, in.size());
  grad.domain = kKilnDomain;
  std::vector<Tensor> g32 = in, g64 = in64;
  for (size_t k = 0; k < outs; ++k) {
    const Tensor dy = random_f32(y32[k].shape(), static_cast<uint32_t>(20 + k), -1.f, 1.f);
    g32.push_back(dy);
    g64.push_back(to_f64(dy));
  }
  const auto d32 = run_node(grad, g32), d64 = run_node(grad, g64);
  ASSERT_EQ(d32.size(), d64.size());
  for (size_t k = 0; k < d32.size(); ++k)
    if (d64[k].defined()) expect_close(d32[k], d64[k], op + "Grad output " + std::to_string(k));
}

TEST(Recurrent, PackedFloat32MatchesFloat64) {
  check_packed_against_float64("RNN", 1, {}, false);
  check_packed_against_float64("GRU", 3, {}, false);
  check_packed_against_float64("GRU", 3, {{"linear_before_reset", Attribute::of_int(1)}}, false);
  check_packed_against_float64("LSTM", 4, {{"direction", Attribute::of_string("bidirectional")}}, true);
}

TEST(Recurrent, ErrorsNameTheProblem) {
  const Tensor x = f32({3, 2, 4}, std::vector<float>(24, 0.1f));
  const Tensor w = f32({1, 20, 4}, std::vector<float>(80, 0.1f)), r = f32({1, 20, 5}, std::vector<float>(100, 0.1f));
  const auto h5 = std::map<std::string, Attribute>{{"hidden_size", Attribute::of_int(5)}};
  expect_error<ShapeError>(
      [&] {
        run_node(rnn("LSTM", 3, h5, 3), {x, f32({1, 16, 4}, std::vector<float>(64)), r});
      },
      {"node 'rec' (LSTM)", "W must be [1, 20, 4]", "W float[1, 16, 4]"});
  expect_error<ShapeError>(
      [&] {
        run_node(rnn("LSTM", 3, h5, 3), {f32({3, 4}, std::vector<float>(12)), w, r});
      },
      "X must be 3-D");
  expect_error<TypeError>(
      [&] {
        run_node(rnn("LSTM", 3, h5, 3), {x, Tensor::zeros(DType::Float64, {1, 20, 4}), r});
      },
      "input 1 is double[1, 20, 4] but X is float[3, 2, 4]");
  expect_error<TypeError>(
      [&] {
        run_node(rnn("LSTM", 5, h5, 3), {x, w, r, Tensor(), Tensor::from_vector<int64_t>({2}, {3, 3})});
      },
      "sequence_lens int64[2] must be int32");
  expect_error<InvalidModel>(
      [&] {
        run_node(rnn("LSTM", 5, h5, 3), {x, w, r, Tensor(), Tensor::from_vector<int32_t>({2}, {3, 4})});
      },
      "sequence_lens[1] = 4 is outside [0, 3]");
  expect_error<ShapeError>(
      [&] {
        run_node(rnn("LSTM", 6, h5, 3), {x, w, r, Tensor(), Tensor(), f32({1, 3, 5}, std::vector<float>(15))});
      },
      "initial_h float[1, 3, 5] must be [1, 2, 5]");
  auto bad = h5;
  bad["activations"] = Attribute::of_strings({"Sigmoid", "Swish", "Tanh"});
  expect_error<Unsupported>([&] { run_node(rnn("LSTM", 3, bad, 3), {x, w, r}); }, "activation 'Swish'");
  bad["activations"] = Attribute::of_strings({"Sigmoid", "Tanh"});
  expect_error<InvalidModel>(
      [&] {
        run_node(rnn("LSTM", 3, bad, 3), {x, w, r});
      },
      "must name 3 function(s) per direction");
  bad = h5;
  bad["direction"] = Attribute::of_string("sideways");
  expect_error<InvalidModel>([&] { run_node(rnn("LSTM", 3, bad, 3), {x, w, r}); }, "direction 'sideways'");
  bad = h5;
  bad["clip"] = Attribute::of_float(-1.0f);
  expect_error<InvalidModel>([&] { run_node(rnn("LSTM", 3, bad, 3), {x, w, r}); }, "clip = -1 must be positive");
  expect_error<Unsupported>(
      [&] {
        run_node(rnn("RNN", 3, {{"hidden_size", Attribute::of_int(1)}}),
                 {Tensor::zeros(DType::Int32, {1, 1, 1}), Tensor::zeros(DType::Int32, {1, 1, 1}),
                  Tensor::zeros(DType::Int32, {1, 1, 1})});
      },
      "dtype int32");
}

}  // namespace
}  // namespace kiln

// Finite-difference checks of the RNN, GRU and LSTM gradients (ai.kiln.RNNGrad / GRUGrad /
// LSTMGrad) with respect to X, W, R, B and the initial states (and LSTM's peepholes): each
// direction, both layouts, sequence lengths shorter than the sequence, clip, the optional
// activations with their alpha / beta, GRU's linear_before_reset and LSTM's input_forget;
// float64 (relative error <= 1e-6) and float32 (<= 1e-3). The loss reads every output (Y, Y_h, Y_c).
#include <gtest/gtest.h>

#include "autodiff/gradient_checker.h"
#include "autodiff/rule_helpers.h"

namespace kiln::testing {
namespace {

using indexing::i;
using indexing::node;
using indexing::s;

struct Case {
  int64_t seq = 4, batch = 3, input = 2, hidden = 3;
  std::string direction = "forward";
  int64_t layout = 0;
  bool lens = false, h0 = true, bias = true;
  std::map<std::string, Attribute> attrs;
};

// Checks op (RNN, GRU, LSTM) on random inputs drawn from `seed`.
void check(const std::string& op, Case c, uint64_t seed) {
  const int64_t gates = op == "RNN" ? 1 : op == "GRU" ? 3 : 4, dirs = c.direction == "bidirectional" ? 2 : 1;
  const int64_t gh = gates * c.hidden;
  const Shape x_shape = c.layout == 0 ? Shape{c.seq, c.batch, c.input} : Shape{c.batch, c.seq, c.input};
  const Shape state = c.layout == 0 ? Shape{dirs, c.batch, c.hidden} : Shape{c.batch, dirs, c.hidden};
  std::vector<Tensor> in{random_tensor(x_shape, seed), random_tensor({dirs, gh, c.input}, seed + 1, -0.7, 0.7),
                         random_tensor({dirs, gh, c.hidden}, seed + 2, -0.7, 0.7)};
  in.push_back(c.bias ? random_tensor({dirs, 2 * gh}, seed + 3, -0.5, 0.5) : Tensor());
  std::vector<int32_t> lens;
  for (int64_t b = 0; b < c.batch; ++b) lens.push_back(static_cast<int32_t>(std::max<int64_t>(1, c.seq - b)));
  in.push_back(c.lens ? Tensor::from_vector<int32_t>({c.batch}, lens) : Tensor());
  in.push_back(c.h0 ? random_tensor(state, seed + 4) : Tensor());
  std::vector<size_t> wrt{0, 1, 2};
  if (c.bias) wrt.push_back(3);
  if (c.h0) wrt.push_back(5);
  if (op == "LSTM") {
    in.push_back(c.h0 ? random_tensor(state, seed + 5) : Tensor());
    in.push_back(random_tensor({dirs, 3 * c.hidden}, seed + 6, -0.5, 0.5));
    if (c.h0) wrt.push_back(6);
    wrt.push_back(7);
  }
  while (!in.back().defined()) in.pop_back();
  std::map<std::string, Attribute> attrs = c.attrs;
  attrs["hidden_size"] = i(c.hidden);
  attrs["direction"] = s(c.direction);
  if (c.layout) attrs["layout"] = i(c.layout);
  const size_t outs = op == "LSTM" ? 3 : 2;
  SCOPED_TRACE(op + " " + c.direction + " layout " + std::to_string(c.layout) + (c.lens ? " with lengths" : ""));
  both({node(op, in, attrs, outs), in, wrt, 17, seed});
}

const std::vector<std::string> kDirections = {"forward", "reverse", "bidirectional"};

TEST(RecurrentGradient, RnnDirectionsLayoutsLengths) {
  uint64_t seed = 5100;
  for (const std::string& d : kDirections)
    for (int64_t layout : {0, 1})
      for (bool lens : {false, true}) check("RNN", {4, 3, 2, 3, d, layout, lens}, seed += 10);
  check("RNN", {3, 2, 2, 2, "forward", 0, false, false, false}, seed += 10);  // no B, no initial_h
}

TEST(RecurrentGradient, GruDirectionsLayoutsLengthsAndLinearBeforeReset) {
  uint64_t seed = 5300;
  for (const std::string& d : kDirections)
    for (int64_t layout : {0, 1})
      for (int64_t lbr : {0, 1})
        check("GRU", {4, 3, 2, 3, d, layout, layout == 1, true, true, {{"linear_before_reset", i(lbr)}}}, seed += 10);
  check("GRU", {3, 2, 2, 2, "reverse", 0, true, false, false}, seed += 10);
}

TEST(RecurrentGradient, LstmDirectionsLayoutsLengthsPeepholesInputForget) {
  uint64_t seed = 5500;
  for (const std::string& d : kDirections)
    for (int64_t layout : {0, 1}) check("LSTM", {4, 3, 2, 3, d, layout, layout == 0}, seed += 10);
  check("LSTM", {4, 2, 3, 2, "bidirectional", 0, true, true, true, {{"input_forget", i(1)}}}, seed += 10);
  check("LSTM", {3, 2, 2, 2, "forward", 1, false, false, false}, seed += 10);
}

// A case over 4 steps, batch 2, input 2, hidden 3 with the given activations, alphas and betas.
Case acts(const std::string& direction, std::vector<std::string> names, std::vector<float> alpha,
          std::vector<float> beta = {}) {
  Case c{4, 2, 2, 3, direction};
  c.attrs["activations"] = Attribute::of_strings(std::move(names));
  if (!alpha.empty()) c.attrs["activation_alpha"] = Attribute::of_floats(std::move(alpha));
  if (!beta.empty()) c.attrs["activation_beta"] = Attribute::of_floats(std::move(beta));
  return c;
}

TEST(RecurrentGradient, ActivationsWithAlphaBetaAndClip) {
  uint64_t seed = 5700;
  // Each function that takes alpha / beta consumes the next ones, in order.
  Case rnn = acts("bidirectional", {"ScaledTanh", "Softsign"}, {0.8f}, {1.3f});
  rnn.lens = true;
  check("RNN", rnn, seed += 10);
  check("GRU", acts("forward", {"HardSigmoid", "Elu"}, {0.3f, 0.7f}, {0.45f}), seed += 10);
  check("LSTM", acts("forward", {"Sigmoid", "Softplus", "Affine"}, {0.9f}, {0.1f}), seed += 10);
  check("LSTM", acts("reverse", {"Sigmoid", "LeakyRelu", "Tanh"}, {0.05f}), seed += 10);
  // clip 0.6 cuts some pre-activations (their gradient is zero) and not others.
  Case gru{4, 3, 2, 3, "bidirectional"}, lstm{4, 3, 2, 3, "forward"};
  gru.attrs["clip"] = lstm.attrs["clip"] = Attribute::of_float(0.6f);
  lstm.lens = true;
  check("GRU", gru, seed += 10);
  check("LSTM", lstm, seed += 10);
}

}  // namespace
}  // namespace kiln::testing

// Gradient rules of RNN, GRU and LSTM (kernels/cpu/rnn.cpp): one ai.kiln.RNNGrad / GRUGrad /
// LSTMGrad node (kernels/cpu/rnn_grad.cpp) takes the forward inputs and the outputs' gradients and
// gives X, W, R, B, initial_h (and initial_c, P) theirs. sequence_lens has none.
#include "autodiff/registry.h"

namespace kiln {
namespace {

void recurrent_grad(GradContext& g, const char* grad_op, size_t n_inputs, size_t n_outputs) {
  std::vector<std::string> in;
  for (size_t i = 0; i < n_inputs; ++i) in.push_back(g.has_input(i) ? g.I(i) : std::string());
  bool any = false;
  for (size_t o = 0; o < n_outputs; ++o) {
    in.push_back(o < g.num_outputs() && !g.O(o).empty() ? g.GO(o) : std::string());
    any = any || !in.back().empty();
  }
  if (!any) return;
  // The gradient op's outputs follow the forward inputs with sequence_lens (input 4) left out.
  const size_t n_grads = n_inputs - 1;
  const std::vector<std::string> grads = g.emit_multi(kKilnDomain, grad_op, in, n_grads, g.node.attrs);
  for (size_t i = 0; i < n_inputs; ++i) {
    if (i == 4 || !g.has_input(i) || !g.needs(i)) continue;
    g.set_GI(i, grads[i < 4 ? i : i - 1]);
  }
}

const GradientRegistrar r_rnn({"", "RNN", 7, kMaxOpset}, [](GradContext& g) { recurrent_grad(g, "RNNGrad", 6, 2); });
const GradientRegistrar r_gru({"", "GRU", 7, kMaxOpset}, [](GradContext& g) { recurrent_grad(g, "GRUGrad", 6, 2); });
const GradientRegistrar r_lstm({"", "LSTM", 7, kMaxOpset}, [](GradContext& g) { recurrent_grad(g, "LSTMGrad", 8, 3); });

}  // namespace
}  // namespace kiln

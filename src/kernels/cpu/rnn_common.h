// The recurrent layers RNN, GRU and LSTM (rnn.cpp) and their gradients (rnn_grad.cpp) share one
// reading of the node (attributes, shapes) and one engine (rnn_engine.cpp): per direction, X times
// W for every step in one product, then one product of the state by R per step and the gates
// elementwise. The gradient recomputes the forward with a tape (gate pre-activations, states) and
// runs back through time; the weight gradients are again one product over all steps.
//
// Semantics are ONNX's: gate orders zrh (GRU) and iofc (LSTM, peepholes iof), sequence_lens
// stopping each batch row early (its Y rows zero past its length, Y_h its last state; a reverse
// pass starts at its last valid step), activations with activation_alpha / activation_beta taken
// in order by the functions that use them, clip applied to the gates' pre-activations (not to the
// LSTM's cell before h, as ONNX Runtime reads the text: tests/python/test_ort_parity_ops.py),
// layout 0 ([S, B, ...]) and 1 ([B, S, ...]).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln::rnn {

enum class Kind { Rnn, Gru, Lstm };

struct Activation {
  enum class Fn {
    Relu,
    Tanh,
    Sigmoid,
    Affine,
    LeakyRelu,
    ThresholdedRelu,
    ScaledTanh,
    HardSigmoid,
    Elu,
    Softsign,
    Softplus
  };
  Fn fn = Fn::Tanh;
  double alpha = 0, beta = 0;
  double f(double x) const;
  // The derivative at x, given y = f(x).
  double df(double x, double y) const;
};

struct Spec {
  Kind kind = Kind::Rnn;
  const char* op = "RNN";
  int64_t gates = 1;   // 1, 3 (zrh) or 4 (iofc)
  int64_t hidden = 0;  // hidden_size
  int64_t dirs = 1;
  bool reverse = false;                 // direction "reverse" (single direction)
  std::vector<Activation> activations;  // per direction: 1 (RNN), 2 (GRU: f, g), 3 (LSTM: f, g, h)
  std::optional<double> clip;
  int64_t layout = 0;
  bool linear_before_reset = false;                                    // GRU
  bool input_forget = false;                                           // LSTM
  size_t state_inputs() const { return kind == Kind::Lstm ? 8 : 6; }   // X W R B lens h0 [c0 P]
  size_t state_outputs() const { return kind == Kind::Lstm ? 3 : 2; }  // Y Y_h [Y_c]
  bool reversed(int64_t dir) const { return dir == 1 || reverse; }
  const Activation& act(int64_t dir, size_t which) const {
    return activations[static_cast<size_t>(dir) * activations.size() / static_cast<size_t>(dirs) + which];
  }
};

// y[i] = a(clip(x[i])) for i < n (x and y may be the same). float32 Sigmoid and Tanh without clip
// run at vector width (exp of kernels/cpu/vector_math.h, within a few ulp of the double
// functions); the rest element by element in double.
void activate(const Activation& a, const std::optional<double>& clip, const float* x, float* y, int64_t n);
void activate(const Activation& a, const std::optional<double>& clip, const double* x, double* y, int64_t n);

// Reads and checks the attributes; `op` names the node's op in errors ("LSTM", "LSTMGrad").
Spec parse_spec(const Node& node, Kind kind, const char* op);

struct Dims {
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1;
};

// Checks X, W, R, B, sequence_lens, initial_h (and initial_c, P) against each other and the
// attributes; the error names each tensor with its shape.
Dims check_inputs(const Spec& s, const InferContext& ctx);
// Y, Y_h (and Y_c) in the node's layout.
Shape y_shape(const Spec& s, const Dims& d);
Shape state_shape(const Spec& s, const Dims& d);

template <class T>
struct Inputs {
  const T* x = nullptr;
  const T* w = nullptr;
  const T* r = nullptr;
  const T* b = nullptr;  // may be null: zero biases
  const int32_t* lens = nullptr;
  const T* h0 = nullptr;
  const T* c0 = nullptr;
  const T* p = nullptr;
};

template <class T>
struct Outputs {
  T* y = nullptr;  // each may be null: not wanted
  T* yh = nullptr;
  T* yc = nullptr;
};

template <class T>
struct Grads {
  const T* dy = nullptr;  // incoming gradients; null ones are zero
  const T* dyh = nullptr;
  const T* dyc = nullptr;
  T* dx = nullptr;  // outgoing; each may be null: not wanted
  T* dw = nullptr;
  T* dr = nullptr;
  T* db = nullptr;
  T* dh0 = nullptr;
  T* dc0 = nullptr;
  T* dp = nullptr;
};

// Output i's buffer, or null when the node does not produce it.
template <class T>
T* optional_output(ComputeContext& ctx, size_t i) {
  return i < ctx.outputs.size() && ctx.outputs[i] && ctx.outputs[i]->defined() ? ctx.outputs[i]->data<T>() : nullptr;
}

// The forward inputs (X W R B sequence_lens initial_h [initial_c P]) of a node or its gradient.
template <class T>
Inputs<T> read_inputs(const Spec& s, const ComputeContext& ctx) {
  const auto in = [&](size_t i) { return ctx.has_input(i) ? ctx.input(i).data<T>() : nullptr; };
  Inputs<T> args{in(0), in(1), in(2), in(3), ctx.has_input(4) ? ctx.input(4).data<int32_t>() : nullptr, in(5)};
  if (s.kind == Kind::Lstm) {
    args.c0 = in(6);
    args.p = in(7);
  }
  return args;
}

// Throws InvalidModel when a sequence length is outside [0, seq].
void check_lengths(const Spec& s, const Dims& d, const int32_t* lens);

template <class T>
void forward(const Spec& s, const Dims& d, const Inputs<T>& in, const Outputs<T>& out);
template <class T>
void backward(const Spec& s, const Dims& d, const Inputs<T>& in, const Grads<T>& g);

}  // namespace kiln::rnn

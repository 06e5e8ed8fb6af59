// ai.kiln.RNNGrad, GRUGrad and LSTMGrad: the gradients of RNN, GRU and LSTM (rnn.cpp) with respect
// to every differentiable input. They take the forward node's inputs and attributes, recompute the
// forward with a tape and run back through time (rnn_engine.cpp).
#include <fmt/format.h>

#include "kernels/cpu/rnn_common.h"
#include "kernels/cpu/visit_float.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

template <rnn::Kind K>
class RecurrentGradKernel final : public Kernel {
 public:
  RecurrentGradKernel(const Node& n, const char* op) : Kernel(n), op_(op) {}
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    spec_ = rnn::parse_spec(node_, K, op_);
    dims_ = rnn::check_inputs(spec_, ctx);
    const size_t n = spec_.state_inputs();
    const TensorMeta& x = ctx.input(0);
    const Shape state = rnn::state_shape(spec_, dims_);
    for (size_t i = 0; i < spec_.state_outputs(); ++i) {
      if (!ctx.has_input(n + i)) continue;
      const Shape want = i == 0 ? rnn::y_shape(spec_, dims_) : state;
      if (ctx.shape(n + i) != want)
        throw ShapeError(fmt::format("{}: gradient of output {} is {} but the output is {}{}", op_, i,
                                     (ctx.input(n + i)).describe(), dtype_name(x.dtype), to_string(want)));
    }
    const int64_t gh = spec_.gates * dims_.hidden;
    std::vector<TensorMeta> out;
    const auto add = [&](Shape s) { out.push_back(TensorMeta{x.dtype, std::move(s), x.dynamic, Tensor()}); };
    add(x.shape);
    add(ctx.shape(1));
    add(ctx.shape(2));
    add({dims_.dirs, 2 * gh});
    add(state);
    if (K == rnn::Kind::Lstm) {
      add(state);
      add({dims_.dirs, 3 * dims_.hidden});
    }
    out.resize(std::min(out.size(), node_.outputs.size()));
    return out;
  }
  void compute(ComputeContext& ctx) override {
    visit_float32_64(ctx.input(0).dtype(), op_, [&](auto tag) {
      using T = decltype(tag);
      const auto in = [&](size_t i) { return ctx.has_input(i) ? ctx.input(i).data<T>() : nullptr; };
      const auto out = [&](size_t i) { return rnn::optional_output<T>(ctx, i); };
      const bool lstm = K == rnn::Kind::Lstm;
      const size_t n = spec_.state_inputs();
      rnn::Grads<T> g{in(n), in(n + 1), lstm ? in(n + 2) : nullptr, out(0), out(1), out(2), out(3), out(4)};
      if (lstm) {
        g.dc0 = out(5);
        g.dp = out(6);
      }
      rnn::backward<T>(spec_, dims_, rnn::read_inputs<T>(spec_, ctx), g);
    });
  }

 private:
  const char* op_;
  rnn::Spec spec_;
  rnn::Dims dims_;
};

const std::vector<DType> kFloats = {DType::Float32, DType::Float64};
const KernelRegistrar rnn_grad_reg({kKilnDomain, "RNNGrad", 1, kMaxOpset, kFloats}, [](const Node& n) {
  return std::make_unique<RecurrentGradKernel<rnn::Kind::Rnn>>(n, "RNNGrad");
});
const KernelRegistrar gru_grad_reg({kKilnDomain, "GRUGrad", 1, kMaxOpset, kFloats}, [](const Node& n) {
  return std::make_unique<RecurrentGradKernel<rnn::Kind::Gru>>(n, "GRUGrad");
});
const KernelRegistrar lstm_grad_reg({kKilnDomain, "LSTMGrad", 1, kMaxOpset, kFloats}, [](const Node& n) {
  return std::make_unique<RecurrentGradKernel<rnn::Kind::Lstm>>(n, "LSTMGrad");
});

constexpr const char* kMath =
    "runs the forward again keeping each step's gate pre-activations and states, then back through time: at each "
    "step the gates' gradients from dH (and dC), dH_prev = dGates R + the direct terms; dW = sum_t dGates_t^T X_t, "
    "dR = sum_t dGates_t^T H_(t-1), dB the sums of the gate gradients. Steps past a row's sequence length pass dH "
    "through unchanged.";

OpDoc doc(const char* op, const char* fwd, std::vector<std::string> inputs, std::vector<std::string> outputs) {
  return {kKilnDomain,
          op,
          fmt::format("Gradient of {} with respect to X, W, R, B and the initial state(s); attributes are the {}'s "
                      "(hidden_size, direction, activations, activation_alpha / beta, clip, layout{}).",
                      fwd, fwd,
                      std::string(fwd) == "GRU"    ? ", linear_before_reset"
                      : std::string(fwd) == "LSTM" ? ", input_forget"
                                                   : ""),
          std::move(inputs),
          std::move(outputs),
          kMath};
}

const std::vector<std::string> kIn = {
    "X, W, R, B, sequence_lens, initial_h: the forward inputs (B, sequence_lens "
    "and initial_h may be omitted)"};
const OpDocRegistrar rnn_grad_doc(doc("RNNGrad", "RNN",
                                      {kIn[0], "dY, dY_h: gradients of Y and Y_h (either omitted: zero)"},
                                      {"dX, dW, dR, dB, dinitial_h: gradients, each shaped like its input"}));
const OpDocRegistrar gru_grad_doc(doc("GRUGrad", "GRU",
                                      {kIn[0], "dY, dY_h: gradients of Y and Y_h (either omitted: zero)"},
                                      {"dX, dW, dR, dB, dinitial_h: gradients, each shaped like its input"}));
const OpDocRegistrar lstm_grad_doc(
    doc("LSTMGrad", "LSTM",
        {kIn[0], "initial_c, P: the LSTM's further inputs (may be omitted)",
         "dY, dY_h, dY_c: gradients of Y, Y_h and Y_c (each omitted: zero)"},
        {"dX, dW, dR, dB, dinitial_h, dinitial_c, dP: gradients, each shaped like its input"}));

}  // namespace
}  // namespace kiln

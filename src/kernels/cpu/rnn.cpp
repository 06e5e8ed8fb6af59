// RNN, GRU and LSTM: one kernel over the shared engine (rnn_common.h, rnn_engine.cpp), float32 and
// float64. Their gradients, ai.kiln.RNNGrad / GRUGrad / LSTMGrad, are in rnn_grad.cpp.
#include <fmt/format.h>

#include "kernels/cpu/rnn_common.h"
#include "kernels/cpu/visit_float.h"
#include "kiln/graph.h"
#include "kiln/kernel.h"

namespace kiln {
namespace {

template <rnn::Kind K>
class RecurrentKernel final : public Kernel {
 public:
  RecurrentKernel(const Node& n, const char* op) : Kernel(n), op_(op) {}
  std::vector<TensorMeta> infer(const InferContext& ctx) override {
    spec_ = rnn::parse_spec(node_, K, op_);
    dims_ = rnn::check_inputs(spec_, ctx);
    const TensorMeta& x = ctx.input(0);
    std::vector<TensorMeta> out{TensorMeta{x.dtype, rnn::y_shape(spec_, dims_), x.dynamic, Tensor()}};
    for (size_t i = 1; i < node_.outputs.size() && i < spec_.state_outputs(); ++i)
      out.push_back(TensorMeta{x.dtype, rnn::state_shape(spec_, dims_), x.dynamic, Tensor()});
    return out;
  }
  void compute(ComputeContext& ctx) override {
    visit_float32_64(ctx.input(0).dtype(), op_, [&](auto tag) {
      using T = decltype(tag);
      const rnn::Outputs<T> o{rnn::optional_output<T>(ctx, 0), rnn::optional_output<T>(ctx, 1),
                              K == rnn::Kind::Lstm ? rnn::optional_output<T>(ctx, 2) : nullptr};
      rnn::forward<T>(spec_, dims_, rnn::read_inputs<T>(spec_, ctx), o);
    });
  }

 private:
  const char* op_;
  rnn::Spec spec_;
  rnn::Dims dims_;
};

const std::vector<DType> kFloats = {DType::Float32, DType::Float64};
const KernelRegistrar rnn_reg({"", "RNN", 7, kMaxOpset, kFloats}, [](const Node& n) {
  return std::make_unique<RecurrentKernel<rnn::Kind::Rnn>>(n, "RNN");
});
const KernelRegistrar gru_reg({"", "GRU", 7, kMaxOpset, kFloats}, [](const Node& n) {
  return std::make_unique<RecurrentKernel<rnn::Kind::Gru>>(n, "GRU");
});
const KernelRegistrar lstm_reg({"", "LSTM", 7, kMaxOpset, kFloats}, [](const Node& n) {
  return std::make_unique<RecurrentKernel<rnn::Kind::Lstm>>(n, "LSTM");
});

}  // namespace
}  // namespace kiln

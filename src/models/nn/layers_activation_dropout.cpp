// ReLU, GELU, SiLU, Tanh, Sigmoid and Dropout as torch.onnx.export writes them at opset 17.
#include <fmt/format.h>

#include <cmath>

#include "kiln/nn/layers.h"
#include "models/nn/layer_util.h"

namespace kiln::nn {

namespace {
// The one float input of a parameterless elementwise module.
const Var& float_input(const Module& m, const std::vector<Var>& inputs) {
  const Var& x = detail::single_input(m, inputs);
  detail::require_float(m, x);
  return x;
}

Var unary(Tracer& t, const std::string& op, const Var& x) { return t.op(op, {x}, {}, x.dtype, x.shape); }
Var binary(Tracer& t, const std::string& op, const Var& a, const Var& b) {
  return t.op(op, {a, b}, {}, a.dtype, a.shape);
}
}  // namespace

std::vector<Var> ReLU::forward(Tracer& t, const std::vector<Var>& inputs) {
  return {unary(t, "Relu", float_input(*this, inputs))};
}

GELU::GELU(std::string approximate) : approximate_(std::move(approximate)) {
  if (approximate_ != "none" && approximate_ != "tanh")
    throw InvalidArgument(
        fmt::format("GELU: approximate argument must be either none or tanh (got '{}')", approximate_));
}

std::vector<Var> GELU::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& x = float_input(*this, inputs);
  auto scalar = [&](double v, const char* hint) { return t.constant_scalar(v, x.dtype, hint); };
  Var inner;
  if (approximate_ == "none") {
    // erf(x / sqrt(2))
    inner = unary(t, "Erf", binary(t, "Div", x, scalar(std::sqrt(2.0), "sqrt2")));
  } else {
    // tanh(sqrt(2/pi) * (x + 0.044715 x^3))
    const Var cube = binary(t, "Mul", binary(t, "Mul", x, x), x);
    const Var sum = binary(t, "Add", x, binary(t, "Mul", cube, scalar(0.044715, "kappa")));
    inner = unary(t, "Tanh", binary(t, "Mul", sum, scalar(std::sqrt(2.0 / M_PI), "beta")));
  }
  const Var y = binary(t, "Mul", x, binary(t, "Add", inner, scalar(1.0, "one")));
  return {binary(t, "Mul", y, scalar(0.5, "half"))};
}

std::vector<Var> SiLU::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& x = float_input(*this, inputs);
  return {binary(t, "Mul", x, unary(t, "Sigmoid", x))};
}

std::vector<Var> Tanh::forward(Tracer& t, const std::vector<Var>& inputs) {
  return {unary(t, "Tanh", float_input(*this, inputs))};
}

std::vector<Var> Sigmoid::forward(Tracer& t, const std::vector<Var>& inputs) {
  return {unary(t, "Sigmoid", float_input(*this, inputs))};
}

Dropout::Dropout(double p, bool inplace) : p_(p), inplace_(inplace) {
  if (!(p >= 0.0 && p <= 1.0))
    throw InvalidArgument(fmt::format("Dropout: dropout probability has to be between 0 and 1, but got {}", p));
}

std::vector<Var> Dropout::forward(Tracer& t, const std::vector<Var>& inputs) {
  const Var& x = float_input(*this, inputs);
  // Eval mode: the identity (torch's exporter drops the node; the Identity keeps this module's
  // output a value of its own for hooks).
  if (!training()) return {unary(t, "Identity", x)};
  // ONNX's ratio must be < 1; torch's p = 1 zeroes everything.
  if (p_ >= 1.0) return {binary(t, "Mul", x, t.constant_scalar(0.0, x.dtype, "zero"))};
  // Training mode as torch exports it: Dropout(x, ratio, training_mode=True) -> (Y, mask); the
  // mask output is what the gradient rule reads to drop the same elements.
  const Var ratio = t.constant_scalar(p_, x.dtype, "ratio");
  const Var mode = t.constant_scalar(1.0, DType::Bool, "training_mode");
  return {t.op_multi("Dropout", {x, ratio, mode}, {}, {{x.dtype, x.shape}, {DType::Bool, x.shape}})[0]};
}

std::string Dropout::extra_repr() const {
  return fmt::format("p={}, inplace={}", detail::py_float(p_), detail::py_bool(inplace_));
}

}  // namespace kiln::nn

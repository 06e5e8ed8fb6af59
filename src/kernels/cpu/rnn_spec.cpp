// Reading an RNN / GRU / LSTM node (rnn_common.h): attributes, activation functions, and the
// shapes of its inputs and outputs.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "kernels/cpu/rnn_common.h"
#include "kernels/cpu/vector_math.h"

namespace kiln::rnn {
namespace {

using Fn = Activation::Fn;

struct FnInfo {
  const char* name;
  Fn fn;
  bool takes_alpha, takes_beta;
  double alpha, beta;  // ONNX's defaults
};

constexpr FnInfo kFns[] = {
    {"relu", Fn::Relu, false, false, 0, 0},
    {"tanh", Fn::Tanh, false, false, 0, 0},
    {"sigmoid", Fn::Sigmoid, false, false, 0, 0},
    {"affine", Fn::Affine, true, true, 1.0, 0.0},
    {"leakyrelu", Fn::LeakyRelu, true, false, 0.01, 0},
    {"thresholdedrelu", Fn::ThresholdedRelu, true, false, 1.0, 0},
    {"scaledtanh", Fn::ScaledTanh, true, true, 1.0, 1.0},
    {"hardsigmoid", Fn::HardSigmoid, true, true, 0.2, 0.5},
    {"elu", Fn::Elu, true, false, 1.0, 0},
    {"softsign", Fn::Softsign, false, false, 0, 0},
    {"softplus", Fn::Softplus, false, false, 0, 0},
};

const FnInfo& find_fn(const std::string& name, const char* op) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const FnInfo& f : kFns)
    if (lower == f.name) return f;
  throw Unsupported(
      fmt::format("{}: activation '{}' is not one of ONNX's (Relu, Tanh, Sigmoid, Affine, LeakyRelu, "
                  "ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus)",
                  op, name));
}

std::vector<std::string> default_activations(Kind k) {
  switch (k) {
    case Kind::Rnn:
      return {"Tanh"};
    case Kind::Gru:
      return {"Sigmoid", "Tanh"};
    case Kind::Lstm:
      return {"Sigmoid", "Tanh", "Tanh"};
  }
  return {};
}

}  // namespace

double Activation::f(double x) const {
  switch (fn) {
    case Fn::Relu:
      return x > 0 ? x : 0;
    case Fn::Tanh:
      return std::tanh(x);
    case Fn::Sigmoid:
      return 1 / (1 + std::exp(-x));
    case Fn::Affine:
      return alpha * x + beta;
    case Fn::LeakyRelu:
      return x >= 0 ? x : alpha * x;
    case Fn::ThresholdedRelu:
      return x > alpha ? x : 0;
    case Fn::ScaledTanh:
      return alpha * std::tanh(beta * x);
    case Fn::HardSigmoid:
      return std::clamp(alpha * x + beta, 0.0, 1.0);
    case Fn::Elu:
      return x >= 0 ? x : alpha * (std::exp(x) - 1);
    case Fn::Softsign:
      return x / (1 + std::abs(x));
    case Fn::Softplus:
      return x > 30 ? x : std::log1p(std::exp(x));
  }
  return 0;
}

double Activation::df(double x, double y) const {
  switch (fn) {
    case Fn::Relu:
      return x > 0 ? 1 : 0;
    case Fn::Tanh:
      return 1 - y * y;
    case Fn::Sigmoid:
      return y * (1 - y);
    case Fn::Affine:
      return alpha;
    case Fn::LeakyRelu:
      return x >= 0 ? 1 : alpha;
    case Fn::ThresholdedRelu:
      return x > alpha ? 1 : 0;
    case Fn::ScaledTanh: {
      const double t = std::tanh(beta * x);
      return alpha * beta * (1 - t * t);
    }
    case Fn::HardSigmoid: {
      const double v = alpha * x + beta;
      return v > 0 && v < 1 ? alpha : 0;
    }
    case Fn::Elu:
      return x >= 0 ? 1 : y + alpha;
    case Fn::Softsign: {
      const double d = 1 + std::abs(x);
      return 1 / (d * d);
    }
    case Fn::Softplus:
      return 1 / (1 + std::exp(-x));
  }
  return 0;
}

namespace {

template <class T>
void activate_each(const Activation& a, const std::optional<double>& clip, const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = clip ? std::clamp(double(x[i]), -*clip, *clip) : double(x[i]);
    y[i] = T(a.f(v));
  }
}

}  // namespace

void activate(const Activation& a, const std::optional<double>& clip, const float* x, float* y, int64_t n) {
  if (clip || (a.fn != Fn::Sigmoid && a.fn != Fn::Tanh)) return activate_each(a, clip, x, y, n);
  // sigmoid(x) = 1 / (1 + e^-x); tanh(x) = 1 - 2 / (e^2x + 1): one vector exp each.
  const bool tanh = a.fn == Fn::Tanh;
  for (int64_t i = 0; i < n; ++i) y[i] = tanh ? 2.0f * x[i] : -x[i];
  vmath::exp_sum(y, n, 0.0f);
  if (tanh)
    for (int64_t i = 0; i < n; ++i) y[i] = 1.0f - 2.0f / (y[i] + 1.0f);
  else
    for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + y[i]);
}

void activate(const Activation& a, const std::optional<double>& clip, const double* x, double* y, int64_t n) {
  activate_each(a, clip, x, y, n);
}

Spec parse_spec(const Node& node, Kind kind, const char* op) {
  Spec s;
  s.kind = kind;
  s.op = op;
  s.gates = kind == Kind::Rnn ? 1 : kind == Kind::Gru ? 3 : 4;
  s.hidden = node.attr_int("hidden_size", 0);
  if (node.has_attr("hidden_size") && s.hidden < 1)
    throw InvalidModel(fmt::format("{}: hidden_size = {} must be positive", op, s.hidden));
  const std::string direction = node.attr_string("direction", "forward");
  if (direction == "bidirectional") s.dirs = 2;
  else if (direction == "reverse") s.reverse = true;
  else if (direction != "forward")
    throw InvalidModel(
        fmt::format("{}: direction '{}' must be 'forward', 'reverse' or 'bidirectional'", op, direction));

  const size_t per_dir = kind == Kind::Rnn ? 1 : kind == Kind::Gru ? 2 : 3;
  std::vector<std::string> names = default_activations(kind);
  if (node.has_attr("activations")) names = node.attrs.at("activations").strings;
  if (names.size() == per_dir && s.dirs == 2) {
    const std::vector<std::string> one = names;  // the same functions for both directions
    names.insert(names.end(), one.begin(), one.end());
  }
  if (names.size() != per_dir * static_cast<size_t>(s.dirs))
    throw InvalidModel(fmt::format("{}: activations [{}] must name {} function(s) per direction ({} direction(s))", op,
                                   fmt::join(names, ", "), per_dir, s.dirs));
  const std::vector<float> alphas = node.attr_floats("activation_alpha", {});
  const std::vector<float> betas = node.attr_floats("activation_beta", {});
  size_t ai = 0, bi = 0;
  for (const std::string& name : names) {
    const FnInfo& info = find_fn(name, op);
    Activation a{info.fn, info.alpha, info.beta};
    if (info.takes_alpha && ai < alphas.size()) a.alpha = alphas[ai++];
    if (info.takes_beta && bi < betas.size()) a.beta = betas[bi++];
    s.activations.push_back(a);
  }
  if (node.has_attr("clip")) {
    const double clip = node.attr_float("clip");
    if (!(clip > 0)) throw InvalidModel(fmt::format("{}: clip = {} must be positive", op, clip));
    s.clip = clip;
  }
  s.layout = node.attr_int("layout", 0);
  if (s.layout != 0 && s.layout != 1) throw InvalidModel(fmt::format("{}: layout = {} must be 0 or 1", op, s.layout));
  if (kind == Kind::Gru) s.linear_before_reset = node.attr_int("linear_before_reset", 0) != 0;
  if (kind == Kind::Lstm) s.input_forget = node.attr_int("input_forget", 0) != 0;
  return s;
}

Dims check_inputs(const Spec& s, const InferContext& ctx) {
  const TensorMeta& x = ctx.input(0);
  const TensorMeta& w = ctx.input(1);
  const TensorMeta& r = ctx.input(2);
  const auto fail = [&](const std::string& what) {
    throw ShapeError(fmt::format("{}: {} (X {}, W {}, R {}, hidden_size {}, {} direction(s), layout {})", s.op, what,
                                 x.describe(), w.describe(), r.describe(), s.hidden, s.dirs, s.layout));
  };
  if (x.shape.size() != 3) fail("X must be 3-D");
  if (w.shape.size() != 3 || r.shape.size() != 3) fail("W and R must be 3-D");
  Dims d;
  d.dirs = s.dirs;
  d.seq = x.shape[s.layout == 0 ? 0 : 1];
  d.batch = x.shape[s.layout == 0 ? 1 : 0];
  d.input = x.shape[2];
  d.hidden = s.hidden > 0 ? s.hidden : r.shape[2];
  const int64_t gh = s.gates * d.hidden;
  if (w.shape != Shape{s.dirs, gh, d.input}) fail(fmt::format("W must be [{}, {}, {}]", s.dirs, gh, d.input));
  if (r.shape != Shape{s.dirs, gh, d.hidden}) fail(fmt::format("R must be [{}, {}, {}]", s.dirs, gh, d.hidden));
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i) || i == 4) continue;
    if (ctx.dtype(i) != x.dtype)
      throw TypeError(fmt::format("{}: input {} is {} but X is {}", s.op, i, ctx.input(i).describe(), x.describe()));
  }
  if (ctx.has_input(3) && ctx.shape(3) != Shape{s.dirs, 2 * gh})
    fail(fmt::format("B {} must be [{}, {}]", ctx.input(3).describe(), s.dirs, 2 * gh));
  if (ctx.has_input(4)) {
    const TensorMeta& lens = ctx.input(4);
    if (lens.dtype != DType::Int32)
      throw TypeError(fmt::format("{}: sequence_lens {} must be int32", s.op, lens.describe()));
    if (lens.shape != Shape{d.batch}) fail(fmt::format("sequence_lens {} must be [{}]", lens.describe(), d.batch));
  }
  const Shape state = state_shape(s, d);
  if (ctx.has_input(5) && ctx.shape(5) != state)
    fail(fmt::format("initial_h {} must be {}", ctx.input(5).describe(), to_string(state)));
  if (s.kind == Kind::Lstm) {
    if (ctx.has_input(6) && ctx.shape(6) != state)
      fail(fmt::format("initial_c {} must be {}", ctx.input(6).describe(), to_string(state)));
    if (ctx.has_input(7) && ctx.shape(7) != Shape{s.dirs, 3 * d.hidden})
      fail(fmt::format("P {} must be [{}, {}]", ctx.input(7).describe(), s.dirs, 3 * d.hidden));
  }
  return d;
}

Shape y_shape(const Spec& s, const Dims& d) {
  return s.layout == 0 ? Shape{d.seq, d.dirs, d.batch, d.hidden} : Shape{d.batch, d.seq, d.dirs, d.hidden};
}

Shape state_shape(const Spec& s, const Dims& d) {
  return s.layout == 0 ? Shape{d.dirs, d.batch, d.hidden} : Shape{d.batch, d.dirs, d.hidden};
}

void check_lengths(const Spec& s, const Dims& d, const int32_t* lens) {
  if (!lens) return;
  for (int64_t b = 0; b < d.batch; ++b)
    if (lens[b] < 0 || lens[b] > d.seq)
      throw InvalidModel(fmt::format("{}: sequence_lens[{}] = {} is outside [0, {}], the sequence length of X", s.op, b,
                                     lens[b], d.seq));
}

}  // namespace kiln::rnn

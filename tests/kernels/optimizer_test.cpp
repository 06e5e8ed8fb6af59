// Optimizer kernels against double-precision references of their formulas: ai.kiln.AdamWStep and
// SGDStep (PyTorch 1.13's AdamW and SGD; bit parity with torch itself is checked by
// tests/python/test_optimizer_ops.py) and ONNX's preview-training Adam, Momentum and Adagrad,
// over several steps, in place and in separate buffers, and their errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>

#include "kernel_test_util.h"
#include "kiln/autodiff.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;

using test_util::as_doubles;
using test_util::expect_bytes_equal;
using test_util::random_real;
using test_util::run_aliased;

const std::string kTraining = "ai.onnx.preview.training";

Node optimizer_node(const std::string& domain, const std::string& op, size_t inputs, size_t outputs,
                    std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.name = "opt";
  n.op_type = op;
  n.domain = domain;
  for (size_t i = 0; i < inputs; ++i) n.inputs.push_back("in" + std::to_string(i));
  for (size_t i = 0; i < outputs; ++i) n.outputs.push_back("out" + std::to_string(i));
  n.attrs = std::move(attrs);
  return n;
}

Tensor lr_tensor(float lr) { return Tensor::scalar<float>(lr); }
Tensor step_tensor(int64_t t) { return Tensor::scalar<int64_t>(t); }

// Each element within rtol * max|want| (the scale of the tensor) of the reference.
void expect_close(const Tensor& got, const std::vector<double>& want, double rtol, const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  const std::vector<double> g = as_doubles(got);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_LE(std::fabs(g[i] - want[i]), rtol * scale)
        << what << " element " << i << ": got " << g[i] << " want " << want[i];
}

// ---- AdamWStep -------------------------------------------------------------------------------

struct AdamWConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0.01;
  bool maximize = false;
};

// torch.optim.AdamW (1.13, single tensor) in double.
void adamw_reference(const AdamWConfig& c, int64_t t, std::vector<double>& x, const std::vector<double>& g,
                     std::vector<double>& m, std::vector<double>& v) {
  const double bc1 = 1 - std::pow(c.beta1, static_cast<double>(t));
  const double bc2 = 1 - std::pow(c.beta2, static_cast<double>(t));
  for (size_t i = 0; i < x.size(); ++i) {
    const double gi = c.maximize ? -g[i] : g[i];
    x[i] *= 1 - c.lr * c.wd;
    m[i] = m[i] * c.beta1 + (1 - c.beta1) * gi;
    v[i] = v[i] * c.beta2 + (1 - c.beta2) * gi * gi;
    const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + c.eps;
    x[i] -= c.lr / bc1 * m[i] / denom;
  }
}

Node adamw_node(const AdamWConfig& c) {
  return optimizer_node(kKilnDomain, "AdamWStep", 6, 3,
                        {{"beta1", Attribute::of_float(static_cast<float>(c.beta1))},
                         {"beta2", Attribute::of_float(static_cast<float>(c.beta2))},
                         {"epsilon", Attribute::of_float(static_cast<float>(c.eps))},
                         {"weight_decay", Attribute::of_float(static_cast<float>(c.wd))},
                         {"maximize", Attribute::of_int(c.maximize ? 1 : 0)}});
}

// Five steps of the kernel, its outputs fed back, against the reference; rtol as stated per dtype.
void check_adamw(const AdamWConfig& c, DType dt, double rtol) {
  const Node node = adamw_node(c);
  const Shape shape{7, 13};
  Tensor x = random_real(dt, shape, 1, -1, 1);
  Tensor m = Tensor::zeros(dt, shape), v = Tensor::zeros(dt, shape);
  std::vector<double> rx = as_doubles(x), rm(rx.size(), 0.0), rv(rx.size(), 0.0);
  for (int64_t t = 1; t <= 5; ++t) {
    const Tensor g = random_real(dt, shape, static_cast<uint32_t>(10 + t), -1, 1);
    adamw_reference(c, t, rx, as_doubles(g), rm, rv);
    const std::vector<Tensor> out = run_node(node, {lr_tensor(static_cast<float>(c.lr)), step_tensor(t), x, g, m, v});
    ASSERT_EQ(out.size(), 3u);
    x = out[0], m = out[1], v = out[2];
    const std::string at = fmt::format("{} step {}", dtype_name(dt), t);
    expect_close(x, rx, rtol, "X " + at);
    expect_close(m, rm, rtol, "M " + at);
    expect_close(v, rv, rtol, "V " + at);
  }
}

// float32: a few roundings per step over 5 steps; float64: the same formulas, so only rounding
// (the hyperparameters are read back as the decimals written, so they agree exactly).
constexpr double kRtol32 = 1e-6, kRtol64 = 1e-13;

TEST(AdamWStep, DefaultsMatchTheReference) {
  check_adamw({}, DType::Float32, kRtol32);
  check_adamw({}, DType::Float64, kRtol64);
}

TEST(AdamWStep, MaximizeWeightDecayAndLargeRateMatchTheReference) {
  AdamWConfig c;
  c.lr = 0.05, c.beta1 = 0.8, c.beta2 = 0.99, c.eps = 1e-6, c.wd = 0.3, c.maximize = true;
  check_adamw(c, DType::Float32, kRtol32);
  check_adamw(c, DType::Float64, kRtol64);
  c.wd = 0, c.maximize = false;
  check_adamw(c, DType::Float32, kRtol32);
  check_adamw(c, DType::Float64, kRtol64);
}

TEST(AdamWStep, FloatAttributesAreReadAsTheirDecimals) {
  // With 0.9f read as 0.899999976, 1 - beta1 would be off by 2.4e-7 relative: far above 1e-13.
  AdamWConfig c;
  c.beta1 = 0.9, c.beta2 = 0.95, c.lr = 3e-4;
  check_adamw(c, DType::Float64, kRtol64);
}

TEST(AdamWStep, InPlaceEqualsSeparateBuffers) {
  const Node node = adamw_node({});
  for (DType dt : {DType::Float32, DType::Float64}) {
    const Shape shape{100003};  // several parallel chunks
    const Tensor x = random_real(dt, shape, 2, -1, 1), g = random_real(dt, shape, 3, -1, 1);
    const Tensor m = random_real(dt, shape, 4, -0.1, 0.1), v = random_real(dt, shape, 5, 0, 0.01);
    const std::vector<Tensor> want = run_node(node, {lr_tensor(1e-2f), step_tensor(3), x, g, m, v});
    // All outputs over their inputs (the Optimizer), then only X_new over X (the planner).
    for (const auto& alias :
         std::vector<std::vector<std::optional<size_t>>>{{2, 4, 5}, {2, std::nullopt, std::nullopt}}) {
      std::vector<Tensor> in{lr_tensor(1e-2f), step_tensor(3), x.clone(), g.clone(), m.clone(), v.clone()};
      const std::vector<Tensor> got = run_aliased(node, in, alias);
      for (size_t o = 0; o < 3; ++o) expect_bytes_equal(got[o], want[o]);
      if (alias[1]) {
        EXPECT_EQ(got[1].raw_data(), in[4].raw_data());
      }
      expect_bytes_equal(in[3], g);  // the gradient is left alone
    }
  }
}

TEST(AdamWStep, Errors) {
  const Node node = adamw_node({});
  const Tensor x = Tensor::zeros(DType::Float32, {2, 3});
  expect_error<ShapeError>(
      [&] {
        run_node(node, {lr_tensor(1e-3f), step_tensor(1), x, x, Tensor::zeros(DType::Float32, {3, 2}), x});
      },
      "M has shape [3, 2] but X has shape [2, 3]");
  expect_error<TypeError>(
      [&] {
        run_node(node, {lr_tensor(1e-3f), step_tensor(1), x, Tensor::zeros(DType::Float64, {2, 3}), x, x});
      },
      "G is double but X is float");
  expect_error<InvalidArgument>(
      [&] {
        run_node(node, {lr_tensor(1e-3f), step_tensor(0), x, x, x, x});
      },
      "step must be >= 1");
  expect_error<InvalidArgument>(
      [&] {
        run_node(node, {lr_tensor(-1e-3f), step_tensor(1), x, x, x, x});
      },
      "learning rate must be >= 0");
  expect_error<TypeError>(
      [&] {
        run_node(node, {lr_tensor(1e-3f), Tensor::scalar<int32_t>(1), x, x, x, x});
      },
      "step count must be int64");
  AdamWConfig bad;
  bad.beta1 = 1.0;
  expect_error<InvalidArgument>(
      [&] {
        run_node(adamw_node(bad), {lr_tensor(1e-3f), step_tensor(1), x, x, x, x});
      },
      "must lie in [0, 1)");
}

// ---- SGDStep ---------------------------------------------------------------------------------

struct SGDConfig {
  double lr = 0.1, momentum = 0, dampening = 0, wd = 0;
  bool nesterov = false, maximize = false;
};

// torch.optim.SGD (1.13, single tensor) in double; `buf` is ignored at t == 1.
void sgd_reference(const SGDConfig& c, int64_t t, std::vector<double>& x, const std::vector<double>& g,
                   std::vector<double>& buf) {
  for (size_t i = 0; i < x.size(); ++i) {
    double d = c.maximize ? -g[i] : g[i];
    if (c.wd != 0) d += c.wd * x[i];
    if (c.momentum != 0) {
      buf[i] = t == 1 ? d : c.momentum * buf[i] + (1 - c.dampening) * d;
      d = c.nesterov ? d + c.momentum * buf[i] : buf[i];
    }
    x[i] -= c.lr * d;
  }
}

Node sgd_node(const SGDConfig& c) {
  const bool buf = c.momentum != 0;
  return optimizer_node(kKilnDomain, "SGDStep", buf ? 5 : 4, buf ? 2 : 1,
                        {{"momentum", Attribute::of_float(static_cast<float>(c.momentum))},
                         {"dampening", Attribute::of_float(static_cast<float>(c.dampening))},
                         {"weight_decay", Attribute::of_float(static_cast<float>(c.wd))},
                         {"nesterov", Attribute::of_int(c.nesterov ? 1 : 0)},
                         {"maximize", Attribute::of_int(c.maximize ? 1 : 0)}});
}

void check_sgd(const SGDConfig& c, DType dt, double rtol) {
  const Node node = sgd_node(c);
  const bool has_buf = c.momentum != 0;
  const Shape shape{5, 11};
  Tensor x = random_real(dt, shape, 21, -1, 1);
  // Garbage at step 1: torch starts the buffer from the first d_p, whatever the state holds.
  Tensor buf = random_real(dt, shape, 22, -5, 5);
  std::vector<double> rx = as_doubles(x), rbuf(rx.size(), 0.0);
  for (int64_t t = 1; t <= 5; ++t) {
    const Tensor g = random_real(dt, shape, static_cast<uint32_t>(30 + t), -1, 1);
    sgd_reference(c, t, rx, as_doubles(g), rbuf);
    std::vector<Tensor> in{lr_tensor(static_cast<float>(c.lr)), step_tensor(t), x, g};
    if (has_buf) in.push_back(buf);
    const std::vector<Tensor> out = run_node(node, in);
    ASSERT_EQ(out.size(), has_buf ? 2u : 1u);
    x = out[0];
    const std::string at = fmt::format("{} step {}", dtype_name(dt), t);
    expect_close(x, rx, rtol, "X " + at);
    if (has_buf) {
      buf = out[1];
      expect_close(buf, rbuf, rtol, "buf " + at);
    }
  }
}

TEST(SGDStep, PlainMatchesTheReference) {
  check_sgd({}, DType::Float32, kRtol32);
  check_sgd({}, DType::Float64, kRtol64);
}

TEST(SGDStep, WeightDecayMaximizeMomentumDampeningNesterov) {
  std::vector<SGDConfig> configs(4);
  configs[0].wd = 0.05, configs[0].maximize = true;
  configs[1].momentum = 0.9;
  configs[2].momentum = 0.8, configs[2].dampening = 0.3, configs[2].wd = 0.01, configs[2].lr = 0.03;
  configs[3].momentum = 0.9, configs[3].nesterov = true, configs[3].wd = 0.02, configs[3].maximize = true;
  for (const SGDConfig& c : configs) {
    check_sgd(c, DType::Float32, kRtol32);
    check_sgd(c, DType::Float64, kRtol64);
  }
}

TEST(SGDStep, InPlaceEqualsSeparateBuffers) {
  SGDConfig c;
  c.momentum = 0.9, c.nesterov = true, c.wd = 0.01;
  const Node node = sgd_node(c);
  for (DType dt : {DType::Float32, DType::Float64}) {
    const Shape shape{70001};
    const Tensor x = random_real(dt, shape, 6, -1, 1), g = random_real(dt, shape, 7, -1, 1);
    const Tensor buf = random_real(dt, shape, 8, -1, 1);
    for (int64_t t : {1, 2}) {
      const std::vector<Tensor> want = run_node(node, {lr_tensor(0.1f), step_tensor(t), x, g, buf});
      std::vector<Tensor> in{lr_tensor(0.1f), step_tensor(t), x.clone(), g.clone(), buf.clone()};
      const std::vector<Tensor> got = run_aliased(node, in, {2, 4});
      expect_bytes_equal(got[0], want[0]);
      expect_bytes_equal(got[1], want[1]);
    }
  }
}

TEST(SGDStep, Errors) {
  const Tensor x = Tensor::zeros(DType::Float32, {4});
  SGDConfig c;
  c.momentum = 0.9;
  expect_error<ShapeError>(
      [&] {
        run_node(sgd_node(c), {lr_tensor(0.1f), step_tensor(1), x, x, Tensor::zeros(DType::Float32, {5})});
      },
      "momentum_buffer has shape [5] but X has shape [4]");
  expect_error<InvalidArgument>(
      [&] {
        run_node(sgd_node(c), {lr_tensor(0.1f), step_tensor(0), x, x, x});
      },
      "step must be >= 1");
  // The buffer goes with momentum != 0, both ways.
  Node no_buffer = sgd_node(c);
  no_buffer.inputs.pop_back();
  no_buffer.outputs.pop_back();
  expect_error<InvalidArgument>(
      [&] {
        run_node(no_buffer, {lr_tensor(0.1f), step_tensor(1), x, x});
      },
      "momentum_buffer must be given exactly when momentum != 0");
  SGDConfig bad;
  bad.nesterov = true;  // without momentum
  expect_error<InvalidArgument>(
      [&] {
        run_node(sgd_node(bad), {lr_tensor(0.1f), step_tensor(1), x, x});
      },
      "nesterov needs momentum > 0 and dampening == 0");
  bad.momentum = 0.9, bad.dampening = 0.1;
  expect_error<InvalidArgument>(
      [&] {
        run_node(sgd_node(bad), {lr_tensor(0.1f), step_tensor(1), x, x, x});
      },
      "nesterov needs momentum > 0 and dampening == 0");
}

// ---- ai.onnx.preview.training ----------------------------------------------------------------

// The spec's formulas in double, for one tensor.
struct OnnxRef {
  double r;
  int64_t t;
  double alpha, beta, eps, norm, norm_post, decay;
};

void onnx_adam(const OnnxRef& p, std::vector<double>& x, const std::vector<double>& g, std::vector<double>& v,
               std::vector<double>& h) {
  const double td = static_cast<double>(p.t);
  const double r = p.t > 0 ? p.r * std::sqrt(1 - std::pow(p.beta, td)) / (1 - std::pow(p.alpha, td)) : p.r;
  for (size_t i = 0; i < x.size(); ++i) {
    const double gr = p.norm * x[i] + g[i];
    v[i] = p.alpha * v[i] + (1 - p.alpha) * gr;
    h[i] = p.beta * h[i] + (1 - p.beta) * gr * gr;
    x[i] = (1 - p.norm_post) * (x[i] - r * v[i] / (std::sqrt(h[i]) + p.eps));
  }
}

void onnx_momentum(const OnnxRef& p, bool nesterov, std::vector<double>& x, const std::vector<double>& g,
                   std::vector<double>& v) {
  for (size_t i = 0; i < x.size(); ++i) {
    const double gr = p.norm * x[i] + g[i];
    v[i] = p.alpha * v[i] + (p.t > 0 ? p.beta : 1.0) * gr;
    x[i] -= p.r * (nesterov ? gr + p.alpha * v[i] : v[i]);
  }
}

void onnx_adagrad(const OnnxRef& p, std::vector<double>& x, const std::vector<double>& g, std::vector<double>& h) {
  const double r = p.r / (1 + static_cast<double>(p.t) * p.decay);
  for (size_t i = 0; i < x.size(); ++i) {
    const double gr = p.norm * x[i] + g[i];
    h[i] += gr * gr;
    x[i] -= r * gr / (std::sqrt(h[i]) + p.eps);
  }
}

// Two tensors of different shapes per call; `groups` tensors each (X, G, then the states, which
// are kept non-negative so that H is a valid sum of squares).
struct TwoTensors {
  std::vector<Tensor> inputs;            // R, T, then group by group
  std::vector<std::vector<double>> ref;  // [group * 2 + k]
};

TwoTensors two_tensors(DType dt, size_t groups, float r, int64_t t) {
  TwoTensors s;
  s.inputs = {lr_tensor(r), step_tensor(t)};
  const Shape shapes[2] = {{3}, {2, 4}};
  for (size_t g = 0; g < groups; ++g)
    for (size_t k = 0; k < 2; ++k) {
      const double lo = g >= 2 ? 0.0 : -1.0;
      s.inputs.push_back(random_real(dt, shapes[k], static_cast<uint32_t>(100 + 10 * g + k), lo, 1));
      s.ref.push_back(as_doubles(s.inputs.back()));
    }
  return s;
}

TEST(PreviewTraining, AdamTwoTensorsWithAndWithoutBiasCorrection) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (int64_t t : {0, 4}) {
      const Node node = optimizer_node(kTraining, "Adam", 10, 6,
                                       {{"alpha", Attribute::of_float(0.85f)},
                                        {"beta", Attribute::of_float(0.95f)},
                                        {"epsilon", Attribute::of_float(1e-3f)},
                                        {"norm_coefficient", Attribute::of_float(0.01f)},
                                        {"norm_coefficient_post", Attribute::of_float(0.02f)}});
      TwoTensors s = two_tensors(dt, 4, 0.1f, t);
      const std::vector<Tensor> out = run_node(node, s.inputs, 1);
      ASSERT_EQ(out.size(), 6u);
      const OnnxRef p{0.1, t, 0.85, 0.95, 1e-3, 0.01, 0.02, 0};
      for (size_t k = 0; k < 2; ++k) {
        onnx_adam(p, s.ref[k], s.ref[2 + k], s.ref[4 + k], s.ref[6 + k]);
        const double rtol = dt == DType::Float32 ? kRtol32 : kRtol64;
        expect_close(out[k], s.ref[k], rtol, fmt::format("X{} T={}", k + 1, t));
        expect_close(out[2 + k], s.ref[4 + k], rtol, fmt::format("V{} T={}", k + 1, t));
        expect_close(out[4 + k], s.ref[6 + k], rtol, fmt::format("H{} T={}", k + 1, t));
      }
    }
  }
}

TEST(PreviewTraining, MomentumStandardAndNesterov) {
  for (const char* mode : {"standard", "nesterov"}) {
    for (int64_t t : {0, 2}) {
      const Node node = optimizer_node(kTraining, "Momentum", 8, 4,
                                       {{"alpha", Attribute::of_float(0.9f)},
                                        {"beta", Attribute::of_float(0.7f)},
                                        {"norm_coefficient", Attribute::of_float(0.05f)},
                                        {"mode", Attribute::of_string(mode)}});
      TwoTensors s = two_tensors(DType::Float64, 3, 0.2f, t);
      const std::vector<Tensor> out = run_node(node, s.inputs, 1);
      const OnnxRef p{0.2, t, 0.9, 0.7, 0, 0.05, 0, 0};
      for (size_t k = 0; k < 2; ++k) {
        onnx_momentum(p, std::string(mode) == "nesterov", s.ref[k], s.ref[2 + k], s.ref[4 + k]);
        expect_close(out[k], s.ref[k], kRtol64, fmt::format("{} X{} T={}", mode, k + 1, t));
        expect_close(out[2 + k], s.ref[4 + k], kRtol64, fmt::format("{} V{} T={}", mode, k + 1, t));
      }
    }
  }
}

TEST(PreviewTraining, AdagradWithDecay) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    const Node node = optimizer_node(kTraining, "Adagrad", 8, 4,
                                     {{"decay_factor", Attribute::of_float(0.1f)},
                                      {"epsilon", Attribute::of_float(1e-5f)},
                                      {"norm_coefficient", Attribute::of_float(0.001f)}});
    TwoTensors s = two_tensors(dt, 3, 0.1f, 3);
    const std::vector<Tensor> out = run_node(node, s.inputs, 1);
    const OnnxRef p{0.1, 3, 0, 0, 1e-5, 0.001, 0, 0.1};
    for (size_t k = 0; k < 2; ++k) {
      onnx_adagrad(p, s.ref[k], s.ref[2 + k], s.ref[4 + k]);
      const double rtol = dt == DType::Float32 ? kRtol32 : kRtol64;
      expect_close(out[k], s.ref[k], rtol, fmt::format("X{}", k + 1));
      expect_close(out[2 + k], s.ref[4 + k], rtol, fmt::format("H{}", k + 1));
    }
  }
}

TEST(PreviewTraining, AdamInPlaceEqualsSeparateBuffers) {
  const Node node = optimizer_node(kTraining, "Adam", 10, 6, {{"norm_coefficient", Attribute::of_float(0.01f)}});
  TwoTensors s = two_tensors(DType::Float32, 4, 0.1f, 2);
  const std::vector<Tensor> want = run_node(node, s.inputs, 1);
  std::vector<Tensor> in;
  for (const Tensor& t : s.inputs) in.push_back(t.clone());
  // X1, X2, V1, V2, H1, H2 over inputs 2, 3, 6, 7, 8, 9.
  const std::vector<Tensor> got = run_aliased(node, in, {2, 3, 6, 7, 8, 9});
  for (size_t o = 0; o < 6; ++o) expect_bytes_equal(got[o], want[o]);
}

TEST(PreviewTraining, Errors) {
  const Tensor x = Tensor::zeros(DType::Float32, {2});
  const Node uneven = optimizer_node(kTraining, "Adam", 7, 3);
  expect_error<InvalidModel>(
      [&] {
        run_node(uneven, {lr_tensor(0.1f), step_tensor(0), x, x, x, x, x}, 1);
      },
      "4 groups of equally many tensors");
  const Node bad_mode = optimizer_node(kTraining, "Momentum", 5, 2,
                                       {{"alpha", Attribute::of_float(0.9f)},
                                        {"beta", Attribute::of_float(0.1f)},
                                        {"norm_coefficient", Attribute::of_float(0.f)},
                                        {"mode", Attribute::of_string("heavy-ball")}});
  expect_error<InvalidArgument>(
      [&] {
        run_node(bad_mode, {lr_tensor(0.1f), step_tensor(0), x, x, x}, 1);
      },
      "mode must be \"standard\" or \"nesterov\"");
  const Node adagrad = optimizer_node(kTraining, "Adagrad", 5, 2);
  expect_error<ShapeError>(
      [&] {
        run_node(adagrad, {lr_tensor(0.1f), step_tensor(0), x, x, Tensor::zeros(DType::Float32, {3})}, 1);
      },
      "H1 has shape [3] but X1 has shape [2]");
  expect_error<InvalidArgument>(
      [&] {
        run_node(adagrad, {lr_tensor(0.1f), step_tensor(-1), x, x, x}, 1);
      },
      "T must be >= 0");
}

TEST(PreviewTraining, NoGradientMarkers) {
  for (const char* op : {"Adam", "Momentum", "Adagrad"})
    EXPECT_EQ(gradient_kind(kTraining, op, 1), GradientKind::NoGradient) << op;
}

}  // namespace
}  // namespace kiln

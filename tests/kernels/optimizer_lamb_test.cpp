// ai.kiln.LambStep against a double-precision reference of the LAMB paper's Algorithm 2 (with and
// without bias correction, with the weight-norm clamp, and at a zero weight), in place and in
// separate buffers, independent of the thread count, and its errors. tests/python/
// test_optimizer_ops.py checks it against a PyTorch implementation of the paper.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <optional>

#include "kernel_test_util.h"
#include "kiln/kernel.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::test::expect_error;
using test_util::as_doubles;
using test_util::expect_bytes_equal;
using test_util::random_real;
using test_util::run_aliased;

struct LambConfig {
  double lr = 1e-2, beta1 = 0.9, beta2 = 0.999, eps = 1e-6, wd = 0.01;
  bool bias_correction = true;
  double max_weight_norm = -1;
};

Node lamb_node(const LambConfig& c) {
  Node n;
  n.name = "opt";
  n.op_type = "LambStep";
  n.domain = kKilnDomain;
  for (int i = 0; i < 6; ++i) n.inputs.push_back("in" + std::to_string(i));
  for (int i = 0; i < 3; ++i) n.outputs.push_back("out" + std::to_string(i));
  n.attrs = {{"beta1", Attribute::of_float(static_cast<float>(c.beta1))},
             {"beta2", Attribute::of_float(static_cast<float>(c.beta2))},
             {"epsilon", Attribute::of_float(static_cast<float>(c.eps))},
             {"weight_decay", Attribute::of_float(static_cast<float>(c.wd))},
             {"bias_correction", Attribute::of_int(c.bias_correction ? 1 : 0)}};
  if (c.max_weight_norm >= 0) n.attrs["max_weight_norm"] = Attribute::of_float(static_cast<float>(c.max_weight_norm));
  return n;
}

// The paper's Algorithm 2 in double.
void lamb_reference(const LambConfig& c, int64_t t, std::vector<double>& x, const std::vector<double>& g,
                    std::vector<double>& m, std::vector<double>& v) {
  const double bc1 = c.bias_correction ? 1 - std::pow(c.beta1, static_cast<double>(t)) : 1;
  const double bc2 = c.bias_correction ? 1 - std::pow(c.beta2, static_cast<double>(t)) : 1;
  std::vector<double> u(x.size());
  double wn = 0, un = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    m[i] = c.beta1 * m[i] + (1 - c.beta1) * g[i];
    v[i] = c.beta2 * v[i] + (1 - c.beta2) * g[i] * g[i];
    u[i] = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + c.eps) + c.wd * x[i];
    wn += x[i] * x[i];
    un += u[i] * u[i];
  }
  wn = std::sqrt(wn), un = std::sqrt(un);
  if (c.max_weight_norm >= 0) wn = std::min(wn, c.max_weight_norm);
  const double trust = wn > 0 && un > 0 ? wn / un : 1;
  for (size_t i = 0; i < x.size(); ++i) x[i] -= c.lr * trust * u[i];
}

void expect_close(const Tensor& got, const std::vector<double>& want, double rtol, const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  const std::vector<double> g = as_doubles(got);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_LE(std::fabs(g[i] - want[i]), rtol * scale) << what << " element " << i;
}

void check_lamb(const LambConfig& c, DType dt, double rtol, bool zero_weight = false) {
  const Node node = lamb_node(c);
  const Shape shape{9, 11};
  Tensor x = zero_weight ? Tensor::zeros(dt, shape) : random_real(dt, shape, 1, -1, 1);
  Tensor m = Tensor::zeros(dt, shape), v = Tensor::zeros(dt, shape);
  std::vector<double> rx = as_doubles(x), rm(rx.size(), 0.0), rv(rx.size(), 0.0);
  for (int64_t t = 1; t <= 5; ++t) {
    const Tensor g = random_real(dt, shape, static_cast<uint32_t>(20 + t), -1, 1);
    lamb_reference(c, t, rx, as_doubles(g), rm, rv);
    const std::vector<Tensor> out =
        run_node(node, {Tensor::scalar<float>(static_cast<float>(c.lr)), Tensor::scalar<int64_t>(t), x, g, m, v});
    x = out[0], m = out[1], v = out[2];
    const std::string at = fmt::format("{} step {}", dtype_name(dt), t);
    expect_close(x, rx, rtol, "X " + at);
    expect_close(m, rm, rtol, "M " + at);
    expect_close(v, rv, rtol, "V " + at);
  }
}

// float32: a few roundings per element per step, and the norms in double; float64: rounding only.
constexpr double kRtol32 = 2e-6, kRtol64 = 1e-12;

TEST(LambStep, MatchesThePapersAlgorithm) {
  check_lamb({}, DType::Float32, kRtol32);
  check_lamb({}, DType::Float64, kRtol64);
}

TEST(LambStep, WithoutBiasCorrectionWithClampAndLargeDecay) {
  LambConfig c;
  c.bias_correction = false;
  check_lamb(c, DType::Float32, kRtol32);
  check_lamb(c, DType::Float64, kRtol64);
  c.max_weight_norm = 0.5, c.wd = 0.3, c.beta1 = 0.8, c.beta2 = 0.99;
  check_lamb(c, DType::Float32, kRtol32);
  check_lamb(c, DType::Float64, kRtol64);
}

TEST(LambStep, AZeroWeightTakesTrustOne) {
  LambConfig c;
  c.wd = 0;
  check_lamb(c, DType::Float64, kRtol64, /*zero_weight=*/true);
}

TEST(LambStep, InPlaceAndThreadCountsGiveTheSameBits) {
  const Node node = lamb_node({});
  const Shape shape{100003};  // several blocks and parallel chunks
  const Tensor x = random_real(DType::Float32, shape, 2, -1, 1), g = random_real(DType::Float32, shape, 3, -1, 1);
  const Tensor m = random_real(DType::Float32, shape, 4, -0.1, 0.1), v = random_real(DType::Float32, shape, 5, 0, 0.01);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<Tensor> want =
      run_node(node, {Tensor::scalar<float>(1e-2f), Tensor::scalar<int64_t>(3), x, g, m, v});
  omp_set_num_threads(std::max(2, threads));
  const std::vector<Tensor> separate =
      run_node(node, {Tensor::scalar<float>(1e-2f), Tensor::scalar<int64_t>(3), x, g, m, v});
  for (size_t o = 0; o < 3; ++o) expect_bytes_equal(separate[o], want[o]);
  // In place: X_new over X, M_new over M, V_new over V, as the Optimizer runs it.
  std::vector<Tensor> in{Tensor::scalar<float>(1e-2f), Tensor::scalar<int64_t>(3), x.clone(), g, m.clone(), v.clone()};
  run_aliased(node, in, {2, 4, 5});
  omp_set_num_threads(threads);
  expect_bytes_equal(in[2], want[0]);
  expect_bytes_equal(in[4], want[1]);
  expect_bytes_equal(in[5], want[2]);
}

TEST(LambStep, Errors) {
  const Tensor x = Tensor::zeros(DType::Float32, {2, 3});
  expect_error<ShapeError>(
      [&] {
        run_node(lamb_node({}), {Tensor::scalar<float>(1e-3f), Tensor::scalar<int64_t>(1), x, x,
                                 Tensor::zeros(DType::Float32, {3, 2}), x});
      },
      "M has shape [3, 2] but X has shape [2, 3]");
  expect_error<InvalidArgument>(
      [&] {
        run_node(lamb_node({}), {Tensor::scalar<float>(1e-3f), Tensor::scalar<int64_t>(0), x, x, x, x});
      },
      "step must be >= 1");
  LambConfig bad;
  bad.beta1 = 1.0;
  expect_error<InvalidArgument>(
      [&] {
        run_node(lamb_node(bad), {Tensor::scalar<float>(1e-3f), Tensor::scalar<int64_t>(1), x, x, x, x});
      },
      "beta1 = 1");
}

}  // namespace
}  // namespace kiln

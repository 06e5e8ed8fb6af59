// torch.nn.init over Kiln's default generator. Draws go through kiln::uniform01 (53 bits of one
// mt19937_64 draw) rather than std:: distributions, whose output the standard leaves unspecified:
// the same seed gives the same weights with every compiler and standard library.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kiln/error.h"
#include "kiln/nn/module.h"
#include "kiln/random.h"

namespace kiln::nn {

namespace {
std::mt19937_64 g_generator{0};

template <class F>
void fill(Tensor& t, const char* what, F&& draw) {
  if (!t.defined()) throw InvalidArgument(fmt::format("nn::init::{}: the tensor is undefined", what));
  if (!is_floating(t.dtype()))
    throw TypeError(fmt::format("nn::init::{}: needs a floating-point tensor, got {}", what, t.describe()));
  if (!t.is_contiguous())
    throw InvalidArgument(fmt::format("nn::init::{}: needs a contiguous tensor, got a view", what));
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16>) {
      T* p = t.data<T>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = from_double<T>(draw());
    }
  });
}

// A standard normal draw (Box-Muller over two uniform01 draws).
double standard_normal(std::mt19937_64& rng) {
  const double u1 = 1.0 - uniform01(rng);  // (0, 1]: log is finite
  const double u2 = uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

double normal_cdf(double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); }

// erf^-1 on (-1, 1): Giles' approximation refined by Newton steps on erf.
double erfinv(double y) {
  const double w = -std::log((1.0 - y) * (1.0 + y));
  double x;
  if (w < 5.0) {
    const double v = w - 2.5;
    double p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
                     0.246640727, 1.50140941})
      p = c + p * v;
    x = p * y;
  } else {
    const double v = std::sqrt(w) - 3.0;
    double p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
                     1.00167406, 2.83297682})
      p = c + p * v;
    x = p * y;
  }
  for (int i = 0; i < 3; ++i) x -= (std::erf(x) - y) / (2.0 / std::sqrt(M_PI) * std::exp(-x * x));
  return x;
}

double calculate_gain_leaky_relu(double a) { return std::sqrt(2.0 / (1.0 + a * a)); }
}  // namespace

void manual_seed(uint64_t seed) { g_generator.seed(seed); }
std::mt19937_64& default_generator() { return g_generator; }

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t) {
  if (t.rank() < 2)
    throw InvalidArgument(
        fmt::format("Fan in and fan out can not be computed for tensor with fewer than 2 "
                    "dimensions (got {})",
                    t.describe()));
  int64_t receptive = 1;
  for (int64_t i = 2; i < t.rank(); ++i) receptive *= t.dim(i);
  return {t.dim(1) * receptive, t.dim(0) * receptive};
}

void uniform_(Tensor& t, double low, double high) {
  if (!(low <= high)) throw InvalidArgument(fmt::format("nn::init::uniform_: low {} > high {}", low, high));
  fill(t, "uniform_", [&] { return low + (high - low) * uniform01(g_generator); });
}

void normal_(Tensor& t, double mean, double std) {
  if (!(std >= 0)) throw InvalidArgument(fmt::format("nn::init::normal_: std must be >= 0, got {}", std));
  fill(t, "normal_", [&] { return mean + std * standard_normal(g_generator); });
}

// torch's trunc_normal_: inverse-CDF sampling of the normal restricted to [a, b], then clamped.
void trunc_normal_(Tensor& t, double mean, double std, double a, double b) {
  if (!(std > 0) || !(a < b))
    throw InvalidArgument(
        fmt::format("nn::init::trunc_normal_: needs std > 0 and a < b, got std={} a={} b={}", std, a, b));
  const double l = normal_cdf((a - mean) / std), u = normal_cdf((b - mean) / std);
  fill(t, "trunc_normal_", [&] {
    const double y = (2 * l - 1) + (2 * u - 2 * l) * uniform01(g_generator);
    const double clipped = std::clamp(y, -1.0 + 1e-15, 1.0 - 1e-15);
    return std::clamp(mean + std * std::sqrt(2.0) * erfinv(clipped), a, b);
  });
}

void kaiming_uniform_(Tensor& t, double a) {
  const auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  if (fan_in == 0) throw InvalidArgument(fmt::format("nn::init::kaiming_uniform_: fan_in is 0 for {}", t.describe()));
  const double bound = std::sqrt(3.0) * calculate_gain_leaky_relu(a) / std::sqrt(double(fan_in));
  uniform_(t, -bound, bound);
}

void xavier_uniform_(Tensor& t, double gain) {
  const auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  if (fan_in + fan_out == 0)
    throw InvalidArgument(fmt::format("nn::init::xavier_uniform_: fans are 0 for {}", t.describe()));
  const double bound = gain * std::sqrt(6.0 / double(fan_in + fan_out));
  uniform_(t, -bound, bound);
}

void constant_(Tensor& t, double value) {
  fill(t, "constant_", [&] { return value; });
}

}  // namespace kiln::nn

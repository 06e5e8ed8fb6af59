#include "kernels/cpu/vector_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/parallel.h"
#include "kernels/cpu/low_precision.h"
#include "kernels/cpu/simd_dispatch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

// glibc's vector variants of erf (libmvec, GLIBC_2.35), named by the x86-64 vector function ABI.
// (Declared with the instruction set their vector arguments need.)
extern "C" [[gnu::target("avx512f")]] __m512d _ZGVeN8v_erf(__m512d);   // NOLINT(bugprone-reserved-identifier)
extern "C" [[gnu::target("avx2")]] __m256d _ZGVdN4v_erf(__m256d);      // NOLINT(bugprone-reserved-identifier)
extern "C" [[gnu::target("avx512f")]] __m512d _ZGVeN8v_exp(__m512d);   // NOLINT(bugprone-reserved-identifier)
extern "C" [[gnu::target("avx2")]] __m256d _ZGVdN4v_exp(__m256d);      // NOLINT(bugprone-reserved-identifier)
extern "C" [[gnu::target("avx512f")]] __m512d _ZGVeN8v_erfc(__m512d);  // NOLINT(bugprone-reserved-identifier)
extern "C" [[gnu::target("avx2")]] __m256d _ZGVdN4v_erfc(__m256d);     // NOLINT(bugprone-reserved-identifier)
extern "C" [[gnu::target("avx512f")]] __m512 _ZGVeN16v_expf(__m512);   // NOLINT(bugprone-reserved-identifier)
extern "C" [[gnu::target("avx2")]] __m256 _ZGVdN8v_expf(__m256);       // NOLINT(bugprone-reserved-identifier)
extern "C" [[gnu::target("avx512f")]] __m512 _ZGVeN16v_erfcf(__m512);  // NOLINT(bugprone-reserved-identifier)
extern "C" [[gnu::target("avx2")]] __m256 _ZGVdN8v_erfcf(__m256);      // NOLINT(bugprone-reserved-identifier)
#endif

namespace kiln::vmath {
namespace {

constexpr int64_t kGrain = 16384;
constexpr int64_t kBlock = 64;  // elements per block of Gelu's double arguments

// out[j] = f(in[j]) over an array of E (double for Gelu's values, float for its gradient), n a
// multiple of `lanes`.
template <class E>
struct Apply {
  void (*f)(const E* in, E* out, int64_t n);
  int64_t lanes;
};

template <class E, E (*F)(E)>
void apply_baseline(const E* in, E* out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] = F(in[j]);
}
double erf_double(double v) { return std::erf(v); }
double exp_double(double v) { return std::exp(v); }
double erfc_double(double v) { return std::erfc(v); }
float erfc_float(float v) { return std::erfc(v); }
float exp_float(float v) { return std::exp(v); }

#if defined(__x86_64__) && defined(__GNUC__)
// The AVX-512 and AVX2 loops: V is the argument type of the vector function, L its lanes.
template <class E, class V, V (*F)(V), int L>
[[gnu::target("avx512f")]] void apply_avx512(const E* in, E* out, int64_t n) {
  for (int64_t j = 0; j < n; j += L) {
    V v;
    std::memcpy(&v, in + j, sizeof v);
    v = F(v);
    std::memcpy(out + j, &v, sizeof v);
  }
}
template <class E, class V, V (*F)(V), int L>
[[gnu::target("avx2")]] void apply_avx2(const E* in, E* out, int64_t n) {
  for (int64_t j = 0; j < n; j += L) {
    V v;
    std::memcpy(&v, in + j, sizeof v);
    v = F(v);
    std::memcpy(out + j, &v, sizeof v);
  }
}
template <class E, class V8, V8 (*F8)(V8), class V4, V4 (*F4)(V4), E (*F1)(E)>
Apply<E> apply_of() {
  constexpr int wide = sizeof(V8) / sizeof(E), narrow = sizeof(V4) / sizeof(E);
  if (simd::simd_level() == simd::SimdLevel::Avx512) return {apply_avx512<E, V8, F8, wide>, wide};
  if (simd::simd_level() == simd::SimdLevel::Avx2) return {apply_avx2<E, V4, F4, narrow>, narrow};
  return {apply_baseline<E, F1>, 1};
}
const Apply<double>& erf_apply() {
  static const Apply<double> a = apply_of<double, __m512d, _ZGVeN8v_erf, __m256d, _ZGVdN4v_erf, erf_double>();
  return a;
}
const Apply<double>& erfc_apply() {
  static const Apply<double> a = apply_of<double, __m512d, _ZGVeN8v_erfc, __m256d, _ZGVdN4v_erfc, erfc_double>();
  return a;
}
const Apply<double>& exp_apply() {
  static const Apply<double> a = apply_of<double, __m512d, _ZGVeN8v_exp, __m256d, _ZGVdN4v_exp, exp_double>();
  return a;
}
const Apply<float>& erfc_apply_float() {
  static const Apply<float> a = apply_of<float, __m512, _ZGVeN16v_erfcf, __m256, _ZGVdN8v_erfcf, erfc_float>();
  return a;
}
const Apply<float>& exp_apply_float() {
  static const Apply<float> a = apply_of<float, __m512, _ZGVeN16v_expf, __m256, _ZGVdN8v_expf, exp_float>();
  return a;
}
#else
const Apply<double>& erf_apply() {
  static const Apply<double> a{apply_baseline<double, erf_double>, 1};
  return a;
}
const Apply<double>& erfc_apply() {
  static const Apply<double> a{apply_baseline<double, erfc_double>, 1};
  return a;
}
const Apply<double>& exp_apply() {
  static const Apply<double> a{apply_baseline<double, exp_double>, 1};
  return a;
}
const Apply<float>& erfc_apply_float() {
  static const Apply<float> a{apply_baseline<float, erfc_float>, 1};
  return a;
}
const Apply<float>& exp_apply_float() {
  static const Apply<float> a{apply_baseline<float, exp_float>, 1};
  return a;
}
#endif

// Gelu's formulas (vector_math.h), split around the special function they evaluate: the argument
// of erfc ("none") or exp ("tanh"), then the value and the slope from the function's value there.
constexpr double kSqrtHalf = 0.7071067811865476, kSqrt2OverPi = 0.7978845608028654, kCubic = 0.044715,
                 kInvSqrt2Pi = 0.3989422804014327;

// gelu_arg in float, for the float paths (the gradient, and Gelu into 16 bits).
template <bool Tanh>
[[gnu::always_inline]] inline float gelu_arg_float(float v) {
  if constexpr (Tanh) return -2.f * (float(kSqrt2OverPi) * (v + float(kCubic) * v * v * v));
  return v * -float(kSqrtHalf);
}
template <bool Tanh>
[[gnu::always_inline]] inline double gelu_arg(double v) {
  if constexpr (Tanh) return -2.0 * (kSqrt2OverPi * (v + kCubic * v * v * v));
  return v * -kSqrtHalf;
}
template <bool Tanh>
[[gnu::always_inline]] inline double gelu_value(double v, double f) {
  if constexpr (Tanh) return v / (1.0 + f);
  return 0.5 * v * f;
}
// `p` is e^(-x^2/2) for "none" (unused for "tanh"). T: double for gelu_slope, float for the float32
// gradient.
template <bool Tanh, class T>
[[gnu::always_inline]] inline T gelu_slope_from(T v, T f, T p) {
  if constexpr (Tanh) {
    const T s = T(1) / (T(1) + f);
    return s + T(2) * v * s * (T(1) - s) * T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * v * v);
  }
  return T(0.5) * f + v * p * T(kInvSqrt2Pi);
}

int64_t round_up(int64_t n, int64_t lanes) { return (n + lanes - 1) / lanes * lanes; }

// The float32 rows of erf() and the softmax rows (sum_exp, scaled_exp), a block at a time like
// Gelu's below: a[j] = double(x[j]) - shift, F on the CPU's vector copy, then out = float(scale *
// F) or a double sum. The padding's arguments are -inf, whose exponential (0) the sum may add.
struct FloatRows {
  const float* x;
  float* y;  // null for a sum
  double shift, scale;
  const Apply<double>* f;
  double* sum;  // the sum's result
};

[[gnu::always_inline]] inline void float_rows_body(const FloatRows& r, int64_t begin, int64_t end) {
  alignas(64) double a[kBlock], f[kBlock];
  double total = 0;
  for (int64_t i = begin; i < end; i += kBlock) {
    const int64_t count = std::min(kBlock, end - i);
    const float* x = r.x + i;
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) a[j] = static_cast<double>(x[j]) - r.shift;
    for (int64_t j = count; j < kBlock; ++j) a[j] = -std::numeric_limits<double>::infinity();
    r.f->f(a, f, round_up(count, r.f->lanes));
    if (r.y == nullptr) {
#pragma omp simd reduction(+ : total)
      for (int64_t j = 0; j < count; ++j) total += f[j];
      continue;
    }
    float* y = r.y + i;
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) y[j] = static_cast<float>(r.scale * f[j]);
  }
  if (r.sum != nullptr) *r.sum = total;
}

// The largest of x[begin, end) into *out: per-lane maxima ((m < v ? v : m) is maxps(v, m), which
// keeps m where v is NaN), then the lanes and the tail.
struct MaxRow {
  const float* x;
  float* out;
};

[[gnu::always_inline]] inline void max_body(const MaxRow& r, int64_t begin, int64_t end) {
  constexpr int64_t kLanes = 16;
  float m[kLanes];
  std::fill(m, m + kLanes, -std::numeric_limits<float>::infinity());
  int64_t j = begin;
  for (; j + kLanes <= end; j += kLanes)
#pragma omp simd
    for (int64_t k = 0; k < kLanes; ++k) m[k] = m[k] < r.x[j + k] ? r.x[j + k] : m[k];
  float best = -std::numeric_limits<float>::infinity();
  for (int64_t k = 0; k < kLanes; ++k) best = std::max(best, m[k]);
  for (; j < end; ++j) best = std::max(best, r.x[j]);
  *r.out = best;
}

// exp_sum's body. exp(v) = 2^n exp(r) with n = round(v log2 e) and r = v - n ln 2 (ln 2 split in a
// high part exact in float and a low part), |r| <= ln2/2, and exp(r) by its Taylor polynomial to r^7
// (truncation error below 2e-8 relative); 2^n goes into the exponent bits. Arguments below -87
// (results below 1.7e-38, near float's smallest normal, and -inf: masked scores) give 0, without the
// slow scalar path libmvec's expf takes for such lanes; NaN stays NaN; above 88.72, inf.
struct ExpSum {
  const float* x;
  float* y;  // x itself, or another array
  float shift;
  double* sum;
};

[[gnu::always_inline]] inline float exp_poly(float v) {
  const float c = v < -87.f ? -87.f : (v > 88.5f ? 88.5f : v);  // NaN passes through (both false)
  // n = round(c log2 e): adding 1.5 * 2^23 rounds to an integer, which the low mantissa bits hold.
  constexpr float kRound = 12582912.f;
  const float t = c * 1.44269504f + kRound;
  const float n = t - kRound;
  const int32_t i = __builtin_bit_cast(int32_t, t) - __builtin_bit_cast(int32_t, kRound);  // n in [-126, 128]
  const float r = (c - n * 0.693145752f) - n * 1.42860677e-6f;
  float p = 1.f / 5040.f;
  p = p * r + 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  // 2^n as 2^(n/2) 2^(n - n/2): each half within float's exponents.
  const int32_t half = i / 2;
  const float s1 = __builtin_bit_cast(float, (half + 127) << 23);
  const float s2 = __builtin_bit_cast(float, (i - half + 127) << 23);
  const float y = p * s1 * s2;
  return v < -87.f ? 0.f : (v > 88.72f ? std::numeric_limits<float>::infinity() : y);
}

[[gnu::always_inline]] inline void exp_sum_body(const ExpSum& r, int64_t begin, int64_t end) {
  const float* x = r.x;
  float* y = r.y;
  const float shift = r.shift;
#pragma omp simd
  for (int64_t j = begin; j < end; ++j) y[j] = exp_poly(x[j] - shift);
  double total = 0;
#pragma omp simd reduction(+ : total)
  for (int64_t j = begin; j < end; ++j) total += static_cast<double>(y[j]);
  *r.sum = total;
}

// One thread's share of gelu() and gelu_grad(), a block at a time: the arguments, the special
// functions on the CPU's vector copy, then the values. simd_dispatch.h bodies, so that the loops
// around the special functions run at the CPU's vector width too. The forward works in double (its
// accuracy contract); the gradient in float, where float's own exp and erfc are accurate enough
// and twice as fast.
struct GeluRows {
  const float* x;
  float* y;  // y, or dx
  const float* dy;
};

template <bool Tanh>
[[gnu::always_inline]] inline void gelu_body(const GeluRows& r, int64_t begin, int64_t end) {
  const Apply<double>& special = Tanh ? exp_apply() : erfc_apply();
  alignas(64) double a[kBlock], f[kBlock];
  for (int64_t i = begin; i < end; i += kBlock) {
    const int64_t count = std::min(kBlock, end - i);
    const float* x = r.x + i;
    float* y = r.y + i;
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) a[j] = gelu_arg<Tanh>(static_cast<double>(x[j]));
    for (int64_t j = count; j < kBlock; ++j) a[j] = 0.0;
    special.f(a, f, round_up(count, special.lanes));
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) y[j] = static_cast<float>(gelu_value<Tanh>(static_cast<double>(x[j]), f[j]));
  }
}

template <bool Tanh>
[[gnu::always_inline]] inline void gelu_grad_body(const GeluRows& r, int64_t begin, int64_t end) {
  const Apply<float>& special = Tanh ? exp_apply_float() : erfc_apply_float();
  const Apply<float>& exp = exp_apply_float();
  alignas(64) float a[kBlock], f[kBlock], b[kBlock], p[kBlock];
  for (int64_t i = begin; i < end; i += kBlock) {
    const int64_t count = std::min(kBlock, end - i);
    const float* x = r.x + i;
    const float* dy = r.dy + i;
    float* dx = r.y + i;
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) {
      a[j] = gelu_arg_float<Tanh>(x[j]);
      b[j] = -0.5f * x[j] * x[j];
    }
    for (int64_t j = count; j < kBlock; ++j) a[j] = b[j] = 0.f;
    special.f(a, f, round_up(count, special.lanes));
    if constexpr (!Tanh) exp.f(b, p, round_up(count, exp.lanes));
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) dx[j] = dy[j] * gelu_slope_from<Tanh>(x[j], f[j], Tanh ? 0.f : p[j]);
  }
}

// Gelu's "none" form in float32 to within a few ulp of the double evaluation: erfc of the float
// argument a = x * -sqrt(1/2), corrected for a's rounding r (exactly, by fma, plus the constant's
// own error), erfc(a + r) = erfc(a) - r (2/sqrt(pi)) e^(-a^2) to first order. Without it the
// rounding of a costs 2 a^2 ulp for x << 0 (about 10 ulp at x = -3).
[[gnu::always_inline]] inline void gelu_erf_float_body(const GeluRows& r, int64_t begin, int64_t end) {
  constexpr float kHi = float(kSqrtHalf), kLo = float(kSqrtHalf - double(float(kSqrtHalf)));
  constexpr float kTwoOverSqrtPi = 1.1283791670955126f;
  const Apply<float>& erfc = erfc_apply_float();
  const Apply<float>& exp = exp_apply_float();
  alignas(64) float a[kBlock], c[kBlock], b[kBlock], f[kBlock], p[kBlock];
  for (int64_t i = begin; i < end; i += kBlock) {
    const int64_t count = std::min(kBlock, end - i);
    const float* x = r.x + i;
    float* y = r.y + i;
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) {
      const float v = x[j];
      a[j] = v * -kHi;
      const float residual = std::fma(v, -kHi, -a[j]) + v * -kLo;
      c[j] = a[j] - a[j] == 0.f ? residual : 0.f;  // 0 for +-inf (and NaN): no inf - inf
      b[j] = -a[j] * a[j];
    }
    for (int64_t j = count; j < kBlock; ++j) a[j] = b[j] = c[j] = 0.f;
    erfc.f(a, f, round_up(count, erfc.lanes));
    exp.f(b, p, round_up(count, exp.lanes));
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) y[j] = 0.5f * x[j] * (f[j] - c[j] * kTwoOverSqrtPi * p[j]);
  }
}

// Gelu into a 16-bit type, evaluated in float32 (erfc and exp from the float vector library, as
// the gradient): for x << 0 the float argument's rounding error grows with x^2 (1e-5 relative at
// x = -10), which is three orders of magnitude below bfloat16's and float16's own roundings.
template <bool Tanh>
[[gnu::always_inline]] inline void gelu_float_body(const GeluRows& r, int64_t begin, int64_t end) {
  const Apply<float>& special = Tanh ? exp_apply_float() : erfc_apply_float();
  alignas(64) float a[kBlock], f[kBlock];
  for (int64_t i = begin; i < end; i += kBlock) {
    const int64_t count = std::min(kBlock, end - i);
    const float* x = r.x + i;
    float* y = r.y + i;
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) a[j] = gelu_arg_float<Tanh>(x[j]);
    for (int64_t j = count; j < kBlock; ++j) a[j] = 0.f;
    special.f(a, f, round_up(count, special.lanes));
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) y[j] = Tanh ? x[j] / (1.f + f[j]) : 0.5f * x[j] * f[j];
  }
}

// gelu() into a 16-bit y: each thread's share a chunk at a time into a float32 buffer on its stack
// (gelu_float_body), then rounded.
template <class S>
void gelu_rounded(const float* x, S* y, int64_t n, bool tanh_form) {
  constexpr int64_t kChunk = 2048;
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    alignas(64) float buffer[kChunk];
    for (int64_t i = b; i < e; i += kChunk) {
      const int64_t count = std::min(kChunk, e - i);
      const GeluRows rows{x + i, buffer, nullptr};
      if (tanh_form) simd::run_best<gelu_float_body<true>>(rows, count);
      else simd::run_best<gelu_float_body<false>>(rows, count);
      narrow_values(buffer, y + i, count);
    }
  });
}

}  // namespace

float erf_one(float x) { return static_cast<float>(std::erf(static_cast<double>(x))); }

float max(const float* x, int64_t n) {
  float m = 0;
  simd::run_best<max_body>(MaxRow{x, &m}, n);
  return m;
}

double sum_exp(const float* x, int64_t n, double shift) {
  double total = 0;
  simd::run_best<float_rows_body>(FloatRows{x, nullptr, shift, 1.0, &exp_apply(), &total}, n);
  return total;
}

void scaled_exp(const float* x, float* y, int64_t n, double shift, double scale) {
  simd::run_best<float_rows_body>(FloatRows{x, y, shift, scale, &exp_apply(), nullptr}, n);
}

double exp_sum(float* x, int64_t n, float shift) { return exp_sum(x, x, n, shift); }

double exp_sum(const float* x, float* y, int64_t n, float shift) {
  double total = 0;
  simd::run_best<exp_sum_body>(ExpSum{x, y, shift, &total}, n);
  return total;
}

double gelu_one(double x, bool tanh_form) {
  if (tanh_form) return gelu_value<true>(x, std::exp(gelu_arg<true>(x)));
  return gelu_value<false>(x, std::erfc(gelu_arg<false>(x)));
}

double gelu_slope(double x, bool tanh_form) {
  if (tanh_form) return gelu_slope_from<true>(x, std::exp(gelu_arg<true>(x)), 0.0);
  return gelu_slope_from<false>(x, std::erfc(gelu_arg<false>(x)), std::exp(-0.5 * x * x));
}

void gelu(const float* x, float* y, int64_t n, bool tanh_form) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    const GeluRows rows{x + b, y + b, nullptr};
    if (tanh_form) simd::run_best<gelu_body<true>>(rows, e - b);
    else simd::run_best<gelu_erf_float_body>(rows, e - b);
  });
}

void gelu_grad(const float* dy, const float* x, float* dx, int64_t n, bool tanh_form) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    const GeluRows rows{x + b, dx + b, dy + b};
    if (tanh_form) simd::run_best<gelu_grad_body<true>>(rows, e - b);
    else simd::run_best<gelu_grad_body<false>>(rows, e - b);
  });
}

void gelu(const float* x, BFloat16* y, int64_t n, bool tanh_form) { gelu_rounded(x, y, n, tanh_form); }
void gelu(const float* x, Half* y, int64_t n, bool tanh_form) { gelu_rounded(x, y, n, tanh_form); }

void erf(const float* x, float* y, int64_t n) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    simd::run_best<float_rows_body>(FloatRows{x + b, y + b, 0.0, 1.0, &erf_apply(), nullptr}, e - b);
  });
}

}  // namespace kiln::vmath

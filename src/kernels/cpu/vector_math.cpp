#include "kernels/cpu/vector_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/parallel.h"
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

// Every copy below evaluates f(double(x[j]) - shift) for each element and then either adds the
// values up in double (sum) or stores float(scale * value) (map). A row's last partial vector is
// copied into a padded block first, so every element goes through the same code; the padding's
// values are never stored, and a sum pads with -inf (exp(-inf) = 0).
//   max:  the largest element, NaNs skipped (std::max(m, x) from m = -inf, as the scalar loop).
struct Copies {
  double (*sum)(const float* x, int64_t n, double shift);
  void (*map)(const float* x, float* y, int64_t n, double shift, double scale);
  float (*max)(const float* x, int64_t n);
};

template <double (*F)(double)>
double sum_baseline(const float* x, int64_t n, double shift) {
  double s[4] = {0, 0, 0, 0};  // four running sums, so the additions need not wait on each other
  for (int64_t j = 0; j < n; ++j) s[j % 4] += F(static_cast<double>(x[j]) - shift);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

template <double (*F)(double)>
void map_baseline(const float* x, float* y, int64_t n, double shift, double scale) {
  for (int64_t j = 0; j < n; ++j) y[j] = static_cast<float>(scale * F(static_cast<double>(x[j]) - shift));
}

float max_baseline(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

#if defined(__x86_64__) && defined(__GNUC__)
#if !defined(__clang__)  // GCC 12 warns inside its own AVX-512 conversion intrinsics (_mm512_undefined)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// Each copy is written with its own instruction set's intrinsics (F's vector type and the
// float <-> double conversions differ), inside a function of that target.
template <__m512d (*F)(__m512d)>
[[gnu::target("avx512f")]] inline __m512d eval8(const float* x, __m512d shift) {
  return F(_mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x)), shift));
}
template <__m256d (*F)(__m256d)>
[[gnu::target("avx2")]] inline __m256d eval4(const float* x, __m256d shift) {
  return F(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x)), shift));
}

template <__m512d (*F)(__m512d)>
[[gnu::target("avx512f")]] double sum_avx512(const float* x, int64_t n, double shift) {
  const __m512d sh = _mm512_set1_pd(shift);
  __m512d a = _mm512_setzero_pd(), b = _mm512_setzero_pd();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    a = _mm512_add_pd(a, eval8<F>(x + j, sh));
    b = _mm512_add_pd(b, eval8<F>(x + j + 8, sh));
  }
  for (; j + 8 <= n; j += 8) a = _mm512_add_pd(a, eval8<F>(x + j, sh));
  if (j < n) {
    float tail[8];
    std::fill(tail, tail + 8, -std::numeric_limits<float>::infinity());
    std::memcpy(tail, x + j, static_cast<size_t>(n - j) * sizeof(float));
    b = _mm512_add_pd(b, eval8<F>(tail, sh));
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(a, b));
}

template <__m512d (*F)(__m512d)>
[[gnu::target("avx512f")]] void map_avx512(const float* x, float* y, int64_t n, double shift, double scale) {
  const __m512d sh = _mm512_set1_pd(shift), sc = _mm512_set1_pd(scale);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, _mm512_cvtpd_ps(_mm512_mul_pd(sc, eval8<F>(x + j, sh))));
  if (j < n) {
    float tail[8] = {};
    std::memcpy(tail, x + j, static_cast<size_t>(n - j) * sizeof(float));
    _mm256_storeu_ps(tail, _mm512_cvtpd_ps(_mm512_mul_pd(sc, eval8<F>(tail, sh))));
    std::memcpy(y + j, tail, static_cast<size_t>(n - j) * sizeof(float));
  }
}

[[gnu::target("avx512f")]] float max_avx512(const float* x, int64_t n) {
  // max_ps(v, m) returns m where v is NaN: NaNs are skipped, as std::max(m, v) does.
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) m = _mm512_max_ps(_mm512_loadu_ps(x + j), m);
  float lanes[16];
  _mm512_storeu_ps(lanes, m);
  return std::max(max_baseline(lanes, 16), max_baseline(x + j, n - j));
}

template <__m256d (*F)(__m256d)>
[[gnu::target("avx2")]] double sum_avx2(const float* x, int64_t n, double shift) {
  const __m256d sh = _mm256_set1_pd(shift);
  __m256d a = _mm256_setzero_pd(), b = _mm256_setzero_pd();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    a = _mm256_add_pd(a, eval4<F>(x + j, sh));
    b = _mm256_add_pd(b, eval4<F>(x + j + 4, sh));
  }
  for (; j + 4 <= n; j += 4) a = _mm256_add_pd(a, eval4<F>(x + j, sh));
  if (j < n) {
    float tail[4];
    std::fill(tail, tail + 4, -std::numeric_limits<float>::infinity());
    std::memcpy(tail, x + j, static_cast<size_t>(n - j) * sizeof(float));
    b = _mm256_add_pd(b, eval4<F>(tail, sh));
  }
  double lanes[4];
  _mm256_storeu_pd(lanes, _mm256_add_pd(a, b));
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

template <__m256d (*F)(__m256d)>
[[gnu::target("avx2")]] void map_avx2(const float* x, float* y, int64_t n, double shift, double scale) {
  const __m256d sh = _mm256_set1_pd(shift), sc = _mm256_set1_pd(scale);
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) _mm_storeu_ps(y + j, _mm256_cvtpd_ps(_mm256_mul_pd(sc, eval4<F>(x + j, sh))));
  if (j < n) {
    float tail[4] = {};
    std::memcpy(tail, x + j, static_cast<size_t>(n - j) * sizeof(float));
    _mm_storeu_ps(tail, _mm256_cvtpd_ps(_mm256_mul_pd(sc, eval4<F>(tail, sh))));
    std::memcpy(y + j, tail, static_cast<size_t>(n - j) * sizeof(float));
  }
}

[[gnu::target("avx2")]] float max_avx2(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + j), m);
  float lanes[8];
  _mm256_storeu_ps(lanes, m);
  return std::max(max_baseline(lanes, 8), max_baseline(x + j, n - j));
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

double erf_double(double v) { return std::erf(v); }
double exp_double(double v) { return std::exp(v); }

// The copies of a function this CPU runs (simd_dispatch.h's choice).
#if defined(__x86_64__) && defined(__GNUC__)
template <__m512d (*F8)(__m512d), __m256d (*F4)(__m256d), double (*F1)(double)>
Copies copies_of() {
  if (simd::simd_level() == simd::SimdLevel::Avx512) return {sum_avx512<F8>, map_avx512<F8>, max_avx512};
  if (simd::simd_level() == simd::SimdLevel::Avx2) return {sum_avx2<F4>, map_avx2<F4>, max_avx2};
  return {sum_baseline<F1>, map_baseline<F1>, max_baseline};
}
const Copies& erf_copies() {
  static const Copies c = copies_of<_ZGVeN8v_erf, _ZGVdN4v_erf, erf_double>();
  return c;
}
const Copies& exp_copies() {
  static const Copies c = copies_of<_ZGVeN8v_exp, _ZGVdN4v_exp, exp_double>();
  return c;
}
#else
const Copies& erf_copies() {
  static const Copies c{sum_baseline<erf_double>, map_baseline<erf_double>, max_baseline};
  return c;
}
const Copies& exp_copies() {
  static const Copies c{sum_baseline<exp_double>, map_baseline<exp_double>, max_baseline};
  return c;
}
#endif

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
      const float v = x[j];
      a[j] = Tanh ? -2.f * (float(kSqrt2OverPi) * (v + float(kCubic) * v * v * v)) : v * -float(kSqrtHalf);
      b[j] = -0.5f * v * v;
    }
    for (int64_t j = count; j < kBlock; ++j) a[j] = b[j] = 0.f;
    special.f(a, f, round_up(count, special.lanes));
    if constexpr (!Tanh) exp.f(b, p, round_up(count, exp.lanes));
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) dx[j] = dy[j] * gelu_slope_from<Tanh>(x[j], f[j], Tanh ? 0.f : p[j]);
  }
}

}  // namespace

float erf_one(float x) { return static_cast<float>(std::erf(static_cast<double>(x))); }

float max(const float* x, int64_t n) { return exp_copies().max(x, n); }

double sum_exp(const float* x, int64_t n, double shift) { return exp_copies().sum(x, n, shift); }

void scaled_exp(const float* x, float* y, int64_t n, double shift, double scale) {
  exp_copies().map(x, y, n, shift, scale);
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
    else simd::run_best<gelu_body<false>>(rows, e - b);
  });
}

void gelu_grad(const float* dy, const float* x, float* dx, int64_t n, bool tanh_form) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    const GeluRows rows{x + b, dx + b, dy + b};
    if (tanh_form) simd::run_best<gelu_grad_body<true>>(rows, e - b);
    else simd::run_best<gelu_grad_body<false>>(rows, e - b);
  });
}

void erf(const float* x, float* y, int64_t n) {
  const Copies& c = erf_copies();
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) { c.map(x + begin, y + begin, end - begin, 0.0, 1.0); });
}

}  // namespace kiln::vmath

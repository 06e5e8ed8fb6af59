#include "kernels/cpu/vector_math.h"

#include <cmath>
#include <cstring>

#include "core/parallel.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

// glibc's vector variants of erf (libmvec, GLIBC_2.35), named by the x86-64 vector function ABI.
// (Declared with the instruction set their vector arguments need.)
extern "C" [[gnu::target("avx512f")]] __m512d _ZGVeN8v_erf(__m512d);  // NOLINT(bugprone-reserved-identifier)
extern "C" [[gnu::target("avx2")]] __m256d _ZGVdN4v_erf(__m256d);     // NOLINT(bugprone-reserved-identifier)
extern "C" [[gnu::target("avx512f")]] __m512d _ZGVeN8v_exp(__m512d);  // NOLINT(bugprone-reserved-identifier)
extern "C" [[gnu::target("avx2")]] __m256d _ZGVdN4v_exp(__m256d);     // NOLINT(bugprone-reserved-identifier)
#endif

namespace kiln::vmath {
namespace {

constexpr int64_t kGrain = 16384;

void erf_baseline(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = erf_one(x[i]);
}

#if defined(__x86_64__) && defined(__GNUC__)
#if !defined(__clang__)  // GCC 12 warns inside its own AVX-512 conversion intrinsics (_mm512_undefined)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
[[gnu::target("avx512f")]] inline __m256 erf8(__m256 x) { return _mm512_cvtpd_ps(_ZGVeN8v_erf(_mm512_cvtps_pd(x))); }

[[gnu::target("avx2")]] inline __m128 erf4(__m128 x) { return _mm256_cvtpd_ps(_ZGVdN4v_erf(_mm256_cvtps_pd(x))); }

// Whole vectors, then the tail padded with zeros, so that every element goes through the same code.
[[gnu::target("avx512f")]] void erf_avx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, erf8(_mm256_loadu_ps(x + i)));
  if (i == n) return;
  float in[8] = {}, out[8];
  std::memcpy(in, x + i, static_cast<size_t>(n - i) * sizeof(float));
  _mm256_storeu_ps(out, erf8(_mm256_loadu_ps(in)));
  std::memcpy(y + i, out, static_cast<size_t>(n - i) * sizeof(float));
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

[[gnu::target("avx2")]] void erf_avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(y + i, erf4(_mm_loadu_ps(x + i)));
  if (i == n) return;
  float in[4] = {}, out[4];
  std::memcpy(in, x + i, static_cast<size_t>(n - i) * sizeof(float));
  _mm_storeu_ps(out, erf4(_mm_loadu_ps(in)));
  std::memcpy(y + i, out, static_cast<size_t>(n - i) * sizeof(float));
}
#endif

// The softmax row helpers. A tail shorter than a vector is padded with -inf (exp gives 0).
double sum_exp_baseline(const float* x, int64_t n, double shift) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - shift);
  return s;
}

void scaled_exp_baseline(const float* x, float* y, int64_t n, double shift, double scale) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(scale * std::exp(static_cast<double>(x[i]) - shift));
}

#if defined(__x86_64__) && defined(__GNUC__)
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
[[gnu::target("avx512f")]] inline __m512d exp8(const float* x, __m512d shift) {
  return _ZGVeN8v_exp(_mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x)), shift));
}

[[gnu::target("avx512f")]] double sum_exp_avx512(const float* x, int64_t n, double shift) {
  const __m512d sh = _mm512_set1_pd(shift);
  __m512d acc = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm512_add_pd(acc, exp8(x + i, sh));
  if (i < n) {
    float tail[8];
    for (float& t : tail) t = -INFINITY;
    std::memcpy(tail, x + i, static_cast<size_t>(n - i) * sizeof(float));
    acc = _mm512_add_pd(acc, exp8(tail, sh));
  }
  double lanes[8];
  _mm512_storeu_pd(lanes, acc);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

[[gnu::target("avx512f")]] void scaled_exp_avx512(const float* x, float* y, int64_t n, double shift, double scale) {
  const __m512d sh = _mm512_set1_pd(shift), sc = _mm512_set1_pd(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm512_cvtpd_ps(_mm512_mul_pd(sc, exp8(x + i, sh))));
  if (i == n) return;
  float tail[8] = {}, out[8];
  std::memcpy(tail, x + i, static_cast<size_t>(n - i) * sizeof(float));
  _mm256_storeu_ps(out, _mm512_cvtpd_ps(_mm512_mul_pd(sc, exp8(tail, sh))));
  std::memcpy(y + i, out, static_cast<size_t>(n - i) * sizeof(float));
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

[[gnu::target("avx2")]] inline __m256d exp4(const float* x, __m256d shift) {
  return _ZGVdN4v_exp(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x)), shift));
}

[[gnu::target("avx2")]] double sum_exp_avx2(const float* x, int64_t n, double shift) {
  const __m256d sh = _mm256_set1_pd(shift);
  __m256d acc = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) acc = _mm256_add_pd(acc, exp4(x + i, sh));
  if (i < n) {
    float tail[4];
    for (float& t : tail) t = -INFINITY;
    std::memcpy(tail, x + i, static_cast<size_t>(n - i) * sizeof(float));
    acc = _mm256_add_pd(acc, exp4(tail, sh));
  }
  double lanes[4];
  _mm256_storeu_pd(lanes, acc);
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

[[gnu::target("avx2")]] void scaled_exp_avx2(const float* x, float* y, int64_t n, double shift, double scale) {
  const __m256d sh = _mm256_set1_pd(shift), sc = _mm256_set1_pd(scale);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(y + i, _mm256_cvtpd_ps(_mm256_mul_pd(sc, exp4(x + i, sh))));
  if (i == n) return;
  float tail[4] = {}, out[4];
  std::memcpy(tail, x + i, static_cast<size_t>(n - i) * sizeof(float));
  _mm_storeu_ps(out, _mm256_cvtpd_ps(_mm256_mul_pd(sc, exp4(tail, sh))));
  std::memcpy(y + i, out, static_cast<size_t>(n - i) * sizeof(float));
}
#endif

enum class Isa { Avx512, Avx2, Baseline };

Isa isa() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f")) return Isa::Avx512;
  if (__builtin_cpu_supports("avx2")) return Isa::Avx2;
#endif
  return Isa::Baseline;
}

using Loop = void (*)(const float*, float*, int64_t);

Loop erf_loop() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa() == Isa::Avx512) return erf_avx512;
  if (isa() == Isa::Avx2) return erf_avx2;
#endif
  return erf_baseline;
}

}  // namespace

float erf_one(float x) { return static_cast<float>(std::erf(static_cast<double>(x))); }

double sum_exp(const float* x, int64_t n, double shift) {
  static const Isa kIsa = isa();
#if defined(__x86_64__) && defined(__GNUC__)
  if (kIsa == Isa::Avx512) return sum_exp_avx512(x, n, shift);
  if (kIsa == Isa::Avx2) return sum_exp_avx2(x, n, shift);
#endif
  return sum_exp_baseline(x, n, shift);
}

void scaled_exp(const float* x, float* y, int64_t n, double shift, double scale) {
  static const Isa kIsa = isa();
#if defined(__x86_64__) && defined(__GNUC__)
  if (kIsa == Isa::Avx512) return scaled_exp_avx512(x, y, n, shift, scale);
  if (kIsa == Isa::Avx2) return scaled_exp_avx2(x, y, n, shift, scale);
#endif
  scaled_exp_baseline(x, y, n, shift, scale);
}

void erf(const float* x, float* y, int64_t n) {
  static const Loop loop = erf_loop();
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) { loop(x + begin, y + begin, end - begin); });
}

}  // namespace kiln::vmath

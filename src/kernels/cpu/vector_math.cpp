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

using Loop = void (*)(const float*, float*, int64_t);

Loop erf_loop() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f")) return erf_avx512;
  if (__builtin_cpu_supports("avx2")) return erf_avx2;
#endif
  return erf_baseline;
}

}  // namespace

float erf_one(float x) { return static_cast<float>(std::erf(static_cast<double>(x))); }

void erf(const float* x, float* y, int64_t n) {
  static const Loop loop = erf_loop();
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) { loop(x + begin, y + begin, end - begin); });
}

}  // namespace kiln::vmath

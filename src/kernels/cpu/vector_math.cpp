#include "kernels/cpu/vector_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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

// The softmax rows' exponentials, a block at a time: out[j] = exp(double(x[j]) - shift) for j < n,
// n a multiple of the copy's lanes and at most kBlock.
using ExpBlock = void (*)(const float* x, int64_t n, double shift, double* out);
constexpr int64_t kBlock = 64;

void exp_block_baseline(const float* x, int64_t n, double shift, double* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = std::exp(static_cast<double>(x[j]) - shift);
}

#if defined(__x86_64__) && defined(__GNUC__)
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
[[gnu::target("avx512f")]] void exp_block_avx512(const float* x, int64_t n, double shift, double* out) {
  const __m512d sh = _mm512_set1_pd(shift);
  for (int64_t j = 0; j < n; j += 8)
    _mm512_storeu_pd(out + j, _ZGVeN8v_exp(_mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + j)), sh)));
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

[[gnu::target("avx2")]] void exp_block_avx2(const float* x, int64_t n, double shift, double* out) {
  const __m256d sh = _mm256_set1_pd(shift);
  for (int64_t j = 0; j < n; j += 4)
    _mm256_storeu_pd(out + j, _ZGVdN4v_exp(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + j)), sh)));
}
#endif

struct ExpRows {
  ExpBlock block = exp_block_baseline;
  int64_t lanes = 1;
};

ExpRows exp_rows() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa() == Isa::Avx512) return {exp_block_avx512, 8};
  if (isa() == Isa::Avx2) return {exp_block_avx2, 4};
#endif
  return {};
}

// Calls use(offset, exponentials, count) over x in blocks, in order; the last block's partial vector
// is padded with -inf, whose exponential (0) is not passed on.
template <class Use>
void for_each_exp_block(const float* x, int64_t n, double shift, Use&& use) {
  static const ExpRows rows = exp_rows();
  double out[kBlock];
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    rows.block(x + i, kBlock, shift, out);
    use(i, out, kBlock);
  }
  if (i == n) return;
  const int64_t rest = n - i, padded = (rest + rows.lanes - 1) / rows.lanes * rows.lanes;
  float tail[kBlock];
  std::fill(tail, tail + kBlock, -std::numeric_limits<float>::infinity());
  std::memcpy(tail, x + i, static_cast<size_t>(rest) * sizeof(float));
  rows.block(tail, padded, shift, out);
  use(i, out, rest);
}

}  // namespace

float erf_one(float x) { return static_cast<float>(std::erf(static_cast<double>(x))); }

double sum_exp(const float* x, int64_t n, double shift) {
  double s[4] = {0, 0, 0, 0};  // four running sums, so the additions need not wait on each other
  for_each_exp_block(x, n, shift, [&](int64_t, const double* e, int64_t count) {
    for (int64_t j = 0; j < count; ++j) s[j % 4] += e[j];
  });
  return (s[0] + s[1]) + (s[2] + s[3]);
}

void scaled_exp(const float* x, float* y, int64_t n, double shift, double scale) {
  for_each_exp_block(x, n, shift, [&](int64_t at, const double* e, int64_t count) {
    for (int64_t j = 0; j < count; ++j) y[at + j] = static_cast<float>(scale * e[j]);
  });
}

void erf(const float* x, float* y, int64_t n) {
  static const Loop loop = erf_loop();
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) { loop(x + begin, y + begin, end - begin); });
}

}  // namespace kiln::vmath

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
extern "C" [[gnu::target("avx512f")]] __m512d _ZGVeN8v_erf(__m512d);  // NOLINT(bugprone-reserved-identifier)
extern "C" [[gnu::target("avx2")]] __m256d _ZGVdN4v_erf(__m256d);     // NOLINT(bugprone-reserved-identifier)
extern "C" [[gnu::target("avx512f")]] __m512d _ZGVeN8v_exp(__m512d);  // NOLINT(bugprone-reserved-identifier)
extern "C" [[gnu::target("avx2")]] __m256d _ZGVdN4v_exp(__m256d);     // NOLINT(bugprone-reserved-identifier)
#endif

namespace kiln::vmath {
namespace {

constexpr int64_t kGrain = 16384;

// A function of float32 inputs evaluated in double, a block at a time: out[j] = f(double(x[j]) -
// shift) for j < n, n a multiple of the copy's lanes and at most kBlock.
using Block = void (*)(const float* x, int64_t n, double shift, double* out);
constexpr int64_t kBlock = 64;

template <double (*F)(double)>
void block_baseline(const float* x, int64_t n, double shift, double* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = F(static_cast<double>(x[j]) - shift);
}

#if defined(__x86_64__) && defined(__GNUC__)
#if !defined(__clang__)  // GCC 12 warns inside its own AVX-512 conversion intrinsics (_mm512_undefined)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
template <__m512d (*F)(__m512d)>
[[gnu::target("avx512f")]] void block_avx512(const float* x, int64_t n, double shift, double* out) {
  const __m512d sh = _mm512_set1_pd(shift);
  for (int64_t j = 0; j < n; j += 8)
    _mm512_storeu_pd(out + j, F(_mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + j)), sh)));
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

template <__m256d (*F)(__m256d)>
[[gnu::target("avx2")]] void block_avx2(const float* x, int64_t n, double shift, double* out) {
  const __m256d sh = _mm256_set1_pd(shift);
  for (int64_t j = 0; j < n; j += 4)
    _mm256_storeu_pd(out + j, F(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + j)), sh)));
}
#endif

// The copy of a function's block this CPU runs (simd_dispatch.h's choice), with its lane count.
struct Rows {
  Block block;
  int64_t lanes;
};

double erf_double(double v) { return std::erf(v); }
double exp_double(double v) { return std::exp(v); }

#if defined(__x86_64__) && defined(__GNUC__)
template <__m512d (*F8)(__m512d), __m256d (*F4)(__m256d), double (*F1)(double)>
Rows rows_of() {
  if (simd::simd_level() == simd::SimdLevel::Avx512) return {block_avx512<F8>, 8};
  if (simd::simd_level() == simd::SimdLevel::Avx2) return {block_avx2<F4>, 4};
  return {block_baseline<F1>, 1};
}
Rows erf_rows() { return rows_of<_ZGVeN8v_erf, _ZGVdN4v_erf, erf_double>(); }
Rows exp_rows() { return rows_of<_ZGVeN8v_exp, _ZGVdN4v_exp, exp_double>(); }
#else
Rows erf_rows() { return {block_baseline<erf_double>, 1}; }
Rows exp_rows() { return {block_baseline<exp_double>, 1}; }
#endif

// Calls use(offset, values, count) over x in blocks, in order. The last block's partial vector is
// padded with `pad`, whose value is not passed on, so every element goes through the same code.
template <class Use>
void for_each_block(const Rows& rows, const float* x, int64_t n, double shift, float pad, Use&& use) {
  double out[kBlock];
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    rows.block(x + i, kBlock, shift, out);
    use(i, out, kBlock);
  }
  if (i == n) return;
  const int64_t rest = n - i, padded = (rest + rows.lanes - 1) / rows.lanes * rows.lanes;
  float tail[kBlock];
  std::fill(tail, tail + kBlock, pad);
  std::memcpy(tail, x + i, static_cast<size_t>(rest) * sizeof(float));
  rows.block(tail, padded, shift, out);
  use(i, out, rest);
}

// The softmax rows' exponentials; the padding's exponential is 0.
template <class Use>
void for_each_exp_block(const float* x, int64_t n, double shift, Use&& use) {
  static const Rows rows = exp_rows();
  for_each_block(rows, x, n, shift, -std::numeric_limits<float>::infinity(), use);
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
  static const Rows rows = erf_rows();
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    for_each_block(rows, x + begin, end - begin, 0.0, 0.f, [&](int64_t at, const double* e, int64_t count) {
      for (int64_t j = 0; j < count; ++j) y[begin + at + j] = static_cast<float>(e[j]);  // erf in double, rounded once
    });
  });
}

}  // namespace kiln::vmath

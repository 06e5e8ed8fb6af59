// One loop body compiled for AVX-512, for AVX2 + FMA3 and for baseline x86-64, and the copy this
// CPU can run picked once at run time. The library is built for baseline x86-64, where a loop runs
// 4 floats (2 doubles) at a time at best. A body is an always_inline function template
// `body(const Args&, begin, end)`; it copies its scalars out of `Args` into locals before its loop
// and marks the loop `#pragma omp simd`. The optimizer updates (optimizer_common.h) and the
// normalisation passes (norm_common.h) use it.
#pragma once

#include <cstdint>

namespace kiln::simd {

enum class SimdLevel { Baseline, Avx2, Avx512 };

inline SimdLevel simd_level() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const SimdLevel level = [] {
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
      return SimdLevel::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdLevel::Avx2;
    return SimdLevel::Baseline;
  }();
  return level;
#else
  return SimdLevel::Baseline;
#endif
}

template <auto Body, class Args>
void run_chunk(const Args& args, int64_t begin, int64_t end) {
  Body(args, begin, end);
}
#if defined(__x86_64__) && defined(__GNUC__)
template <auto Body, class Args>
[[gnu::target("avx2,fma")]] void run_chunk_avx2(const Args& args, int64_t begin, int64_t end) {
  Body(args, begin, end);
}
template <auto Body, class Args>
[[gnu::target("avx512f,avx512vl,avx2,fma")]] void run_chunk_avx512(const Args& args, int64_t begin, int64_t end) {
  Body(args, begin, end);
}
#endif

// The best copy of `Body` for this CPU over [0, n), on the calling thread.
template <auto Body, class Args>
void run_best(const Args& args, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (simd_level()) {
    case SimdLevel::Avx512:
      return run_chunk_avx512<Body>(args, 0, n);
    case SimdLevel::Avx2:
      return run_chunk_avx2<Body>(args, 0, n);
    case SimdLevel::Baseline:
      break;
  }
#endif
  run_chunk<Body>(args, 0, n);
}

}  // namespace kiln::simd

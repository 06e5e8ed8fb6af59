// One loop body compiled for AVX-512, for AVX2 + FMA3 and for baseline x86-64, and the copy this
// CPU can run picked once at run time. The library is built for baseline x86-64, where a loop runs
// 4 floats (2 doubles) at a time at best. A body is an always_inline function template
// `body(const Args&, begin, end)`; it copies its scalars out of `Args` into locals before its loop
// and marks the loop `#pragma omp simd`. The optimizer updates (optimizer_common.h) and the
// normalisation passes (norm_common.h) use it.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace kiln::simd {

enum class SimdLevel { Baseline, Avx2, Avx512 };

// oneDNN's ISA cap, ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA), holds Kiln's own vector code to the
// same level: "AVX2" runs everything as on a CPU without AVX-512 (how the AVX2 paths are tested
// and measured on an AVX-512 machine), "SSE41" or "AVX" the baseline loops. Unset, "ALL", AVX-512
// and AMX names, or a value oneDNN does not know, cap nothing.
inline SimdLevel isa_cap() {
  const char* v = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (v == nullptr) v = std::getenv("DNNL_MAX_CPU_ISA");
  if (v == nullptr) return SimdLevel::Avx512;
  std::string isa(v);
  for (char& c : isa) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (isa.rfind("AVX2", 0) == 0) return SimdLevel::Avx2;
  if (isa == "SSE41" || isa == "AVX") return SimdLevel::Baseline;
  return SimdLevel::Avx512;
}

inline SimdLevel simd_level() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const SimdLevel level = [] {
    SimdLevel cpu = SimdLevel::Baseline;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
      cpu = SimdLevel::Avx512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) cpu = SimdLevel::Avx2;
    return std::min(cpu, isa_cap());
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

#include "kernels/cpu/blas.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <string>

#include "kernels/cpu/simd_dispatch.h"
#include "kiln/error.h"

namespace kiln::blas {
namespace {

// CBLAS's enums, as OpenBLAS's cblas.h numbers them.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

using CblasDgemm = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int, double,
                            double*, int);
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                            int);

// Debian's OpenBLAS built on OpenMP, by its path: the default libopenblas.so.0 is usually the
// pthread build, whose own threads would spin against Kiln's.
#if defined(__x86_64__)
constexpr const char* kOpenMpOpenBlas = "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0";
#elif defined(__aarch64__)
constexpr const char* kOpenMpOpenBlas = "/usr/lib/aarch64-linux-gnu/openblas-openmp/libopenblas.so.0";
#else
constexpr const char* kOpenMpOpenBlas = "";
#endif

// That library's cblas_sgemm, or null when it is not installed.
CblasSgemm load_openmp_sgemm() {
  if (*kOpenMpOpenBlas == '\0') return nullptr;
  void* lib = ::dlopen(kOpenMpOpenBlas, RTLD_NOW | RTLD_LOCAL);
  return lib == nullptr ? nullptr : reinterpret_cast<CblasSgemm>(::dlsym(lib, "cblas_sgemm"));
}

CblasSgemm openmp_sgemm() {
  static const CblasSgemm f = load_openmp_sgemm();
  return f;
}

bool fits_int(const GemmShape& s) {
  for (int64_t v : {s.m, s.n, s.k, s.lda, s.ldb, s.ldc})
    if (v > INT32_MAX) return false;
  return true;
}

// OpenBLAS's cblas_dgemm, or null with why in `error`.
CblasDgemm load_dgemm(std::string& error) {
  for (const char* name : {"libopenblas.so.0", "libblas.so.3"}) {
    void* lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = ::dlerror();
      error += fmt::format("{}{}", error.empty() ? "" : "; ", why ? why : name);
      continue;
    }
    if (void* f = ::dlsym(lib, "cblas_dgemm")) return reinterpret_cast<CblasDgemm>(f);
    error += fmt::format("{}{} has no cblas_dgemm", error.empty() ? "" : "; ", name);
  }
  return nullptr;
}

int as_int(int64_t v, const char* what) {
  if (v > INT32_MAX)
    throw Unsupported(fmt::format("a float64 matrix product with {} = {} is too large for BLAS", what, v));
  return static_cast<int>(v);
}

}  // namespace

namespace {

// Empty products: nothing to write (m or n is 0), or C = beta * C (k is 0), which BLAS allows but
// oneDNN's sgemm refuses. True when handled.
template <class T>
bool degenerate(const GemmShape& s, T beta, T* c) {
  if (s.m > 0 && s.n > 0 && s.k > 0) return false;
  if (s.m > 0 && s.n > 0)
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) c[i * s.ldc + j] = beta == T(0) ? T(0) : beta * c[i * s.ldc + j];
  return true;
}

}  // namespace

bool openblas_sgemm() {
  static const bool use = [] {
    const char* choice = std::getenv("KILN_SGEMM");
    const std::string want = choice ? choice : "";
    if (want == "onednn") return false;
    if (want == "openblas") {
      if (openmp_sgemm() == nullptr)
        throw Unsupported(
            fmt::format("KILN_SGEMM=openblas: OpenBLAS's OpenMP build ({}, Debian's "
                        "libopenblas0-openmp) could not be loaded",
                        kOpenMpOpenBlas));
      return true;
    }
    if (!want.empty()) throw InvalidArgument(fmt::format("KILN_SGEMM='{}': expected onednn or openblas", want));
    return simd::simd_level() != simd::SimdLevel::Avx512 && openmp_sgemm() != nullptr;
  }();
  return use;
}

void sgemm(const GemmShape& s, float alpha, const float* a, const float* b, float beta, float* c) {
  if (degenerate(s, beta, c)) return;
  // Inside a parallel region (fused attention's blocks, one per thread) the products are small
  // and oneDNN's single-threaded sgemm measured faster.
  if (openblas_sgemm() && !omp_in_parallel() && fits_int(s)) {
    openmp_sgemm()(kRowMajor, s.trans_a ? kTrans : kNoTrans, s.trans_b ? kTrans : kNoTrans, int(s.m), int(s.n),
                   int(s.k), alpha, a, int(s.lda), b, int(s.ldb), beta, c, int(s.ldc));
    return;
  }
  const dnnl_status_t status = dnnl_sgemm(s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', s.m, s.n, s.k, alpha, a, s.lda,
                                          b, s.ldb, beta, c, s.ldc);
  if (status != dnnl_success)
    throw Error(fmt::format("oneDNN's sgemm failed (status {}) on [{}, {}] x [{}, {}]", static_cast<int>(status), s.m,
                            s.k, s.k, s.n));
}

void dgemm(const GemmShape& s, double alpha, const double* a, const double* b, double beta, double* c) {
  if (degenerate(s, beta, c)) return;
  static std::string error;
  static const CblasDgemm f = load_dgemm(error);
  if (f == nullptr)
    throw Unsupported("float64 matrix products need OpenBLAS (libopenblas0), which could not be loaded: " + error);
  f(kRowMajor, s.trans_a ? kTrans : kNoTrans, s.trans_b ? kTrans : kNoTrans, as_int(s.m, "M"), as_int(s.n, "N"),
    as_int(s.k, "K"), alpha, a, as_int(s.lda, "lda"), b, as_int(s.ldb, "ldb"), beta, c, as_int(s.ldc, "ldc"));
}

}  // namespace kiln::blas

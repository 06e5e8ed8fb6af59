#include "kernels/cpu/blas.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>

#include <string>

#include "kiln/error.h"

namespace kiln::blas {
namespace {

// CBLAS's enums, as OpenBLAS's cblas.h numbers them.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

using CblasDgemm = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int, double,
                            double*, int);

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

void sgemm(const GemmShape& s, float alpha, const float* a, const float* b, float beta, float* c) {
  if (degenerate(s, beta, c)) return;
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

// Row-major general matrix products, C = alpha * op(A) * op(B) + beta * C, for the kernels that
// are not a oneDNN primitive (float64 MatMul and Gemm, Einsum's batched products).
//
// float32 runs on oneDNN's sgemm, on the OpenMP threads every other kernel uses, except on CPUs
// without AVX-512 where OpenBLAS's OpenMP build is installed (see openblas_sgemm). float64 runs on
// OpenBLAS, which Kiln loads only when a float64 product first runs: OpenBLAS's pthread build
// starts its own worker threads when it is loaded, and they spin for about 0.1 s, taking a core
// from Kiln's threads in the first runs of every process that never multiplies a double.
#pragma once

#include <cstdint>

namespace kiln::blas {

struct GemmShape {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;  // leading dimensions of A, B, C as stored (row-major)
};

void sgemm(const GemmShape& s, float alpha, const float* a, const float* b, float beta, float* c);

// Whether float32 products run on OpenBLAS instead of oneDNN. Without AVX-512, oneDNN 2.6 has only
// its older jit sgemm, which runs the weight-gradient shapes of a transformer (K = 2048, M or N
// 256, A transposed) at 45-55% of OpenBLAS's speed (bench/README.md). There, when Debian's
// OpenBLAS built on OpenMP (libopenblas0-openmp) loads, it takes every float32 product: it runs
// on the OpenMP threads Kiln's kernels use, follows their count and runs on the calling thread
// inside a parallel region, so it never competes with them for cores (its pthread build would).
// KILN_SGEMM=onednn or =openblas overrides the choice (measurements; openblas needs the library).
bool openblas_sgemm();
// Throws Unsupported when OpenBLAS (libopenblas0) cannot be loaded.
void dgemm(const GemmShape& s, double alpha, const double* a, const double* b, double beta, double* c);

// A plain row-major product: m x k times k x n into m x n.
inline GemmShape plain(int64_t m, int64_t n, int64_t k) { return {false, false, m, n, k, k, n, n}; }

}  // namespace kiln::blas

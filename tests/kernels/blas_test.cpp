// Where float32 products run (kernels/cpu/blas.h): OpenBLAS's OpenMP build takes them on CPUs
// without AVX-512 (or under ONEDNN_MAX_CPU_ISA=AVX2, as the kernels_held_to_avx2 test runs this),
// oneDNN everywhere else; either way the product is right, transposed operands and beta included.
#include "kernels/cpu/blas.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/simd_dispatch.h"

namespace kiln::blas {
namespace {

TEST(Blas, OpenBlasTakesFloat32ProductsExactlyWithoutAvx512) {
  const bool installed = ::access("/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0", R_OK) == 0;
  if (std::getenv("KILN_SGEMM") == nullptr) {
    const bool expected = installed && simd::simd_level() != simd::SimdLevel::Avx512;
    EXPECT_EQ(openblas_sgemm(), expected);
  }
}

// C = alpha op(A) op(B) + beta C against a double loop, for each transpose pair, from outside and
// from inside a parallel region (where oneDNN's sgemm runs on each thread).
TEST(Blas, SgemmMatchesALoopForEveryTransposePair) {
  const int64_t m = 37, n = 53, k = 129;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> a(size_t(m * k)), b(size_t(k * n)), c0(size_t(m * n));
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  for (float& v : c0) v = u(rng);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      const GemmShape s{ta, tb, m, n, k, ta ? m : k, tb ? k : n, n};
      std::vector<double> want(size_t(m * n));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t p = 0; p < k; ++p)
            acc += double(ta ? a[size_t(p * m + i)] : a[size_t(i * k + p)]) *
                   double(tb ? b[size_t(j * k + p)] : b[size_t(p * n + j)]);
          want[size_t(i * n + j)] = 0.5 * acc + 0.25 * double(c0[size_t(i * n + j)]);
        }
      for (const bool nested : {false, true}) {
        std::vector<float> c = c0;
        if (nested) {
          parallel_for(2, 1, [&](int64_t begin, int64_t) {
            if (begin == 0) sgemm(s, 0.5f, a.data(), b.data(), 0.25f, c.data());
          });
        } else {
          sgemm(s, 0.5f, a.data(), b.data(), 0.25f, c.data());
        }
        for (size_t i = 0; i < c.size(); ++i)
          ASSERT_NEAR(c[i], want[i], 1e-4)
              << "transA " << ta << " transB " << tb << " nested " << nested << " at " << i;
      }
    }
}

}  // namespace
}  // namespace kiln::blas

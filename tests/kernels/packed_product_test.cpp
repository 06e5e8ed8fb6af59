// PackedProduct (kernels/cpu/packed_product.h), the recurrent layers' repeated product with B
// packed once: against a double-precision loop, with B transposed or not, leading dimensions wider
// than the matrices, repeated runs on new A (B packed once), and shapes too small or empty. Where
// the CPU has AVX-512 (oneDNN's brgemm matmul) a batch of 32 by 256 x 1024 is packed; held to
// AVX2 it is not, and the same checks run on sgemm.
#include "kernels/cpu/packed_product.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace kiln {
namespace {

struct Shape3 {
  int64_t m, n, k;
  bool trans_b;
  int64_t lda, ldb, ldc;
};

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void check(const Shape3& s, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "m " << s.m << " n " << s.n << " k " << s.k << " trans_b " << s.trans_b);
  const std::vector<float> b = random_values(static_cast<size_t>((s.trans_b ? s.n : s.k) * s.ldb), seed);
  PackedProduct p(s.m, s.n, s.k, b.data(), s.trans_b, s.lda, s.ldb, s.ldc);
  for (uint32_t round = 0; round < 3; ++round) {  // new A each time, B packed once
    const std::vector<float> a = random_values(static_cast<size_t>(s.m * s.lda), seed + 10 + round);
    std::vector<float> c(static_cast<size_t>(s.m * s.ldc), 7.f);  // columns past n must stay as they are
    p.run(a.data(), c.data());
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.ldc; ++j) {
        if (j >= s.n) {
          ASSERT_EQ(c[size_t(i * s.ldc + j)], 7.f) << "wrote past n at " << i << ", " << j;
          continue;
        }
        double want = 0;
        for (int64_t q = 0; q < s.k; ++q)
          want += double(a[size_t(i * s.lda + q)]) * (s.trans_b ? b[size_t(j * s.ldb + q)] : b[size_t(q * s.ldb + j)]);
        ASSERT_NEAR(c[size_t(i * s.ldc + j)], want, 1e-5 * (1 + std::sqrt(double(s.k)))) << i << ", " << j;
      }
  }
}

TEST(PackedProduct, MatchesADoubleLoop) {
  check({32, 1024, 256, true, 256, 256, 1024}, 1);  // an LSTM step: H_prev R^T, batch 32, H 256
  check({5, 48, 32, true, 32, 32, 64}, 2);          // GRU's first 2H of 3H columns (ldc wider than n)
  check({7, 40, 24, false, 36, 40, 40}, 3);         // the backward's dA R, A a slice of wider rows
  check({3, 12, 3, true, 3, 3, 12}, 4);             // tiny (the gradient checks' sizes)
}

TEST(PackedProduct, PacksWhereOneDnnHasBrgemm) {
  const std::vector<float> b = random_values(1024 * 256, 5);
  const PackedProduct p(32, 1024, 256, b.data(), true, 256, 256, 1024);
  // oneDNN 2.6 has brgemm matmuls from AVX-512 on; held to AVX2 (the kernels_held_to_avx2 ctest
  // entry) the products run on sgemm.
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (__builtin_cpu_supports("avx512f") && cap == nullptr) {
    EXPECT_TRUE(p.packed());
  }
  if (cap != nullptr && std::string(cap) == "AVX2") {
    EXPECT_FALSE(p.packed());
  }
}

TEST(PackedProduct, EmptyShapesRunAsNothing) {
  const std::vector<float> b(16, 1.f), a(16, 1.f);
  std::vector<float> c(16, 3.f);
  PackedProduct none(0, 4, 4, b.data(), true, 4, 4, 4);
  EXPECT_FALSE(none.packed());
  none.run(a.data(), c.data());
  EXPECT_EQ(c[0], 3.f);
}

}  // namespace
}  // namespace kiln

// C = A * op(B) repeated with one B: the recurrent product of RNN, GRU and LSTM, H_prev R^T at
// every time step. oneDNN's sgemm packs B into its blocked layout at every call, which for a
// batch of a few dozen rows costs more than the product (one LSTM step of batch 32, H 256: 244 us
// against 89 us on AVX-512). Here B is reordered once into the layout oneDNN's brgemm matmul reads,
// and each product runs on the prepared primitive. Float32. Where oneDNN has no brgemm matmul for
// the shapes (CPUs without AVX-512) the products run on blas::sgemm as before.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/cpu/blas.h"

namespace kiln {

class PackedProduct {
 public:
  // C[m, n] = A[m, k] * op(B), op(B) = B^T of a row-major B[n, k] when trans_b, else B[k, n];
  // row-major with leading dimensions lda, ldb, ldc. `b` must outlive the object and not change.
  PackedProduct(int64_t m, int64_t n, int64_t k, const float* b, bool trans_b, int64_t lda, int64_t ldb, int64_t ldc);
  ~PackedProduct();
  PackedProduct(const PackedProduct&) = delete;
  PackedProduct& operator=(const PackedProduct&) = delete;

  // C = A * op(B) (beta 0).
  void run(const float* a, float* c);
  // Whether B was packed for oneDNN (false: each run is one blas::sgemm).
  bool packed() const { return impl_ != nullptr; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  blas::GemmShape shape_;
  const float* b_;
};

}  // namespace kiln

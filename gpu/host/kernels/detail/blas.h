#pragma once

#include <cblas.h>

#include <cstdint>
#include <limits>

#include "base/assert.h"

namespace strata::gpu::host::kernels::detail {

// Makes sure OpenBLAS runs the micro-kernels this CPU supports (matmul.cpp; see
// blas_kernels() in matmul.h). Cheap after the first call; every kernel calls it first.
void choose_blas_kernels();

// OpenBLAS splits a product differently for each of its thread counts, and its micro-kernels then
// sum in another order: measured here, sgemm with 3 or 5 threads gives other bits than with 1 or 2
// (OpenBLAS 0.3.21, Sapphire Rapids kernels). The kernels therefore run OpenBLAS single-threaded
// (process-wide, checked on every kernel call, so a benchmark that raised the count cannot leave
// it raised) and split work themselves into fixed pieces that oneTBB runs in parallel: each piece
// is the same BLAS call whatever the thread count, hence the same bits.
inline void pin_blas_to_one_thread() {
  choose_blas_kernels();
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

// The CBLAS interface takes int sizes (Debian's OpenBLAS uses 32-bit integers).
inline blasint to_blas(std::int64_t size) {
  STRATA_ASSERT(size >= 0 && size <= std::numeric_limits<blasint>::max());
  return static_cast<blasint>(size);
}

// C[m, n] = alpha * op(A) @ op(B) + beta * C, row-major, on the calling thread.
inline void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                 float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                 float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, to_blas(m), to_blas(n), to_blas(k), alpha, a,
              to_blas(lda), b, to_blas(ldb), beta, c, to_blas(ldc));
}

inline void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                 double alpha, const double* a, std::int64_t lda, const double* b, std::int64_t ldb,
                 double beta, double* c, std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, to_blas(m), to_blas(n), to_blas(k), alpha, a,
              to_blas(lda), b, to_blas(ldb), beta, c, to_blas(ldc));
}

// y[m] = alpha * A[m, n] @ x[n] + beta * y (A row-major, unit strides), on the calling thread.
inline void gemv(std::int64_t m, std::int64_t n, float alpha, const float* a, std::int64_t lda,
                 const float* x, float beta, float* y) {
  cblas_sgemv(CblasRowMajor, CblasNoTrans, to_blas(m), to_blas(n), alpha, a, to_blas(lda), x, 1,
              beta, y, 1);
}

inline void gemv(std::int64_t m, std::int64_t n, double alpha, const double* a, std::int64_t lda,
                 const double* x, double beta, double* y) {
  cblas_dgemv(CblasRowMajor, CblasNoTrans, to_blas(m), to_blas(n), alpha, a, to_blas(lda), x, 1,
              beta, y, 1);
}

}  // namespace strata::gpu::host::kernels::detail

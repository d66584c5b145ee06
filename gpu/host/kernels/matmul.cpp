#include "gpu/host/kernels/matmul.h"

#include <cblas.h>

#include <limits>

#include "base/assert.h"
#include "gpu/host/kernels/detail/parallel.h"

namespace strata::gpu::host::kernels {
namespace {

// The CBLAS interface takes int sizes (OpenBLAS is built with 32-bit integers on Debian).
blasint to_blas(std::int64_t size) {
  STRATA_ASSERT(size >= 0 && size <= std::numeric_limits<blasint>::max());
  return static_cast<blasint>(size);
}

// C[m, n] = alpha * op(A) @ op(B) + beta * C, row-major.
void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
          float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
          float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, to_blas(m), to_blas(n), to_blas(k), alpha, a,
              to_blas(lda), b, to_blas(ldb), beta, c, to_blas(ldc));
}

void gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
          double alpha, const double* a, std::int64_t lda, const double* b, std::int64_t ldb,
          double beta, double* c, std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, to_blas(m), to_blas(n), to_blas(k), alpha, a,
              to_blas(lda), b, to_blas(ldb), beta, c, to_blas(ldc));
}

}  // namespace

template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias,
                    std::int64_t rows, std::int64_t in_channels, std::int64_t out_channels) {
  STRATA_ASSERT(rows >= 0 && in_channels > 0 && out_channels > 0);
  STRATA_ASSERT(out != nullptr && inp != nullptr && weight != nullptr);
  if (rows == 0) return;
  Real beta = 0;
  if (bias != nullptr) {
    // Start every row at the bias and let the product accumulate onto it (beta = 1).
    detail::parallel_chunks(rows, detail::grain_for(out_channels),
                            [&](std::int64_t begin, std::int64_t end) {
                              for (std::int64_t row = begin; row < end; ++row) {
                                Real* out_row = out + row * out_channels;
                                for (std::int64_t o = 0; o < out_channels; ++o)
                                  out_row[o] = bias[o];
                              }
                            });
    beta = 1;
  }
  gemm(false, true, rows, out_channels, in_channels, Real{1}, inp, in_channels, weight, in_channels,
       beta, out, out_channels);
}

template <typename Real>
void matmul_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, std::int64_t rows, std::int64_t in_channels,
                     std::int64_t out_channels) {
  STRATA_ASSERT(rows >= 0 && in_channels > 0 && out_channels > 0);
  STRATA_ASSERT(dinp != nullptr && dweight != nullptr && dout != nullptr);
  STRATA_ASSERT(inp != nullptr && weight != nullptr);
  if (rows == 0) return;
  // dinp[rows, in] += dout[rows, out] @ weight[out, in]
  gemm(false, false, rows, in_channels, out_channels, Real{1}, dout, out_channels, weight,
       in_channels, Real{1}, dinp, in_channels);
  // dweight[out, in] += dout[rows, out]^T @ inp[rows, in]
  gemm(true, false, out_channels, in_channels, rows, Real{1}, dout, out_channels, inp, in_channels,
       Real{1}, dweight, in_channels);
  if (dbias == nullptr) return;
  constexpr std::int64_t slice = 64;
  const std::int64_t slices = (out_channels + slice - 1) / slice;
  detail::parallel_chunks(
      slices, detail::grain_for(rows * slice), [&](std::int64_t begin, std::int64_t end) {
        const std::int64_t o_begin = begin * slice;
        const std::int64_t o_end = end * slice < out_channels ? end * slice : out_channels;
        for (std::int64_t row = 0; row < rows; ++row) {
          const Real* dout_row = dout + row * out_channels;
          for (std::int64_t o = o_begin; o < o_end; ++o)
            dbias[o] += dout_row[o];
        }
      });
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, std::int64_t,
                                    std::int64_t, std::int64_t);
template void matmul_forward<double>(double*, const double*, const double*, const double*,
                                     std::int64_t, std::int64_t, std::int64_t);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, std::int64_t, std::int64_t, std::int64_t);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, std::int64_t, std::int64_t, std::int64_t);

}  // namespace strata::gpu::host::kernels

#include "gpu/host/kernels/matmul.h"

#include <cstdlib>
#include <cstring>

#include "base/assert.h"
#include "base/log.h"
#include "gpu/host/kernels/detail/blas.h"
#include "gpu/host/kernels/detail/parallel.h"

// OpenBLAS's DYNAMIC_ARCH builds export these (driver/others/dynamic.c): quit forgets the chosen
// kernel table and init chooses again, reading OPENBLAS_CORETYPE first. Weak, so a build
// against an OpenBLAS compiled for one CPU (no DYNAMIC_ARCH) links and leaves its kernels alone.
extern "C" {
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace strata::gpu::host::kernels {
namespace {

// The family this CPU's features support, or nullptr when Prescott's SSE3 is all it has.
const char* supported_family() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

const char* choose_once() {
  const char* chosen = openblas_get_corename();
  bool fell_back = chosen != nullptr && std::strcmp(chosen, "Prescott") == 0;
  const char* family = supported_family();
  if (!fell_back || family == nullptr || std::getenv("OPENBLAS_CORETYPE") != nullptr ||
      gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) {
    return chosen;
  }
  // Before any product runs: OpenBLAS's worker threads are idle, nothing reads the table.
  ::setenv("OPENBLAS_CORETYPE", family, 0);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  const char* now = openblas_get_corename();
  base::logger("gpu").info(
      "OpenBLAS did not recognise this CPU and fell back to Prescott (SSE3) kernels; switched to "
      "{} (set OPENBLAS_CORETYPE to choose)",
      now);
  return now;
}

// The product is cut into fixed tiles of the result, never of the summed dimension; see
// detail/blas.h for why OpenBLAS itself runs single-threaded. OpenBLAS packs a tile's panel of
// B for each call, so a tile as tall as a micro-batch of 256 tokens packs each weight panel
// once (64-row tiles packed it four times: 0.80x OpenBLAS's own sgemm on the 2B config's
// products, against 0.96x). The demo and the 2B config train to the same bits with either.
constexpr std::int64_t tile_rows = 256;
constexpr std::int64_t tile_cols = 256;

// C[m, n] = alpha * op(A) @ op(B) + beta * C (row-major), tile by tile.
template <typename Real>
void tiled_gemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                Real alpha, const Real* a, std::int64_t lda, const Real* b, std::int64_t ldb,
                Real beta, Real* c, std::int64_t ldc) {
  detail::pin_blas_to_one_thread();
  const std::int64_t row_tiles = (m + tile_rows - 1) / tile_rows;
  const std::int64_t col_tiles = (n + tile_cols - 1) / tile_cols;
  detail::parallel_chunks(row_tiles * col_tiles, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t tile = begin; tile < end; ++tile) {
      const std::int64_t row = (tile / col_tiles) * tile_rows;
      const std::int64_t col = (tile % col_tiles) * tile_cols;
      const std::int64_t tile_m = m - row < tile_rows ? m - row : tile_rows;
      const std::int64_t tile_n = n - col < tile_cols ? n - col : tile_cols;
      // op(A) rows [row, row + tile_m): rows of A, or columns of A when it is transposed.
      const Real* a_tile = transpose_a ? a + row : a + row * lda;
      // op(B) columns [col, col + tile_n): columns of B, or rows of B when it is transposed.
      const Real* b_tile = transpose_b ? b + col * ldb : b + col;
      detail::gemm(transpose_a, transpose_b, tile_m, tile_n, k, alpha, a_tile, lda, b_tile, ldb,
                   beta, c + row * ldc + col, ldc);
    }
  });
}

// A product of a few rows (a decode step's: one token per sequence) reads each weight once per
// row through OpenBLAS's sgemv, which streams the weight without packing it; sgemm packs every
// panel it reads, which for one row costs more than the product. A tile's panel of the weight
// (gemv_cols x in_channels) stays in cache across the rows, so memory sees it once; tiles of 64
// outputs split even a 768-wide projection evenly over the workers.
constexpr std::int64_t gemv_rows = 8;
constexpr std::int64_t gemv_cols = 64;

template <typename Real>
void few_rows_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const Real* inp,
                   const Real* weight, Real beta, Real* out) {
  detail::pin_blas_to_one_thread();
  const std::int64_t col_tiles = (n + gemv_cols - 1) / gemv_cols;
  detail::parallel_chunks(col_tiles, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t tile = begin; tile < end; ++tile) {
      const std::int64_t col = tile * gemv_cols;
      const std::int64_t tile_n = n - col < gemv_cols ? n - col : gemv_cols;
      for (std::int64_t row = 0; row < m; ++row) {
        detail::gemv(tile_n, k, Real{1}, weight + col * k, k, inp + row * k, beta,
                     out + row * n + col);
      }
    }
  });
}

}  // namespace

namespace detail {

void choose_blas_kernels() {
  blas_kernels();
}

}  // namespace detail

const char* blas_kernels() {
  static const char* const family = choose_once();
  return family;
}

template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias,
                    std::int64_t rows, std::int64_t in_channels, std::int64_t out_channels,
                    bool rows_alone) {
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
  if (rows <= gemv_rows || rows_alone) {
    few_rows_gemm(rows, out_channels, in_channels, inp, weight, beta, out);
    return;
  }
  tiled_gemm(false, true, rows, out_channels, in_channels, Real{1}, inp, in_channels, weight,
             in_channels, beta, out, out_channels);
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
  tiled_gemm(false, false, rows, in_channels, out_channels, Real{1}, dout, out_channels, weight,
             in_channels, Real{1}, dinp, in_channels);
  // dweight[out, in] += dout[rows, out]^T @ inp[rows, in]
  tiled_gemm(true, false, out_channels, in_channels, rows, Real{1}, dout, out_channels, inp,
             in_channels, Real{1}, dweight, in_channels);
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
                                    std::int64_t, std::int64_t, bool);
template void matmul_forward<double>(double*, const double*, const double*, const double*,
                                     std::int64_t, std::int64_t, std::int64_t, bool);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, std::int64_t, std::int64_t, std::int64_t);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, std::int64_t, std::int64_t, std::int64_t);

}  // namespace strata::gpu::host::kernels

#pragma once

// OpenBLAS's own multi-threaded sgemm on a layer's products, the bound `strata bench gemm` puts
// beside the host device's matmul ops, and sgemm on a large square product as the machine's BLAS
// ceiling. Both are timed on the host clock: median of the calls after one warm-up call.

#include <cstdint>
#include <functional>

#include "bench/bench_gemm_shapes.h"

namespace strata::tools {

// Median seconds of one call over `repeats` calls, after one warm-up call.
double median_seconds(const std::function<void()>& call, int repeats);

struct SgemmTimes {
  double forward_s = 0;   // out = inp @ weight^T
  double backward_s = 0;  // dinp += dout @ weight, then dweight += dout^T @ inp
};

// The layer's forward and backward products through OpenBLAS on `threads` threads, in fp32.
SgemmTimes time_sgemm(const GemmLayer& layer, int threads, int repeats);

// Seconds of one size^3 product through OpenBLAS on `threads` threads (median).
double square_sgemm_seconds(std::int64_t size, int threads, int repeats);

}  // namespace strata::tools

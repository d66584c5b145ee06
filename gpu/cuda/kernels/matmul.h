#pragma once

#include "gpu/cuda/kernels/element_types.h"

// What the matrix products need besides cuBLASLt (gpu/cuda/cuda_matmul.h), the kernels of the twin
// of gpu/host/kernels/matmul.h, for T = float, __nv_bfloat16, __half (element_types.h).
namespace strata::gpu::cuda::kernels {

// target[c] += sum over rows of source[r, c] (the matmul's dbias, fp32): column tiles over slices
// of rows, each summing its rows in fp32, the slices' sums added with atomicAdd.
template <typename T>
cudaError_t column_sums_accumulate(cudaStream_t stream, float* target, const T* source, i64 rows,
                                   i64 columns);

// The forward's epilogue where cuBLASLt's could not run: with x = product[r, c] + bias[c] in fp32
// (bias may be null), out = x, or with `pre` non-null pre = x and out = gelu(x), each rounded once.
// `product` is the fp32 result of the product; for T = float it may be `out` or `pre` itself.
template <typename T>
cudaError_t finish_product(cudaStream_t stream, T* out, T* pre, const float* product, const T* bias,
                           i64 rows, i64 columns);

}  // namespace strata::gpu::cuda::kernels

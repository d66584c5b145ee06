#pragma once

#include <cstdint>

#include "gpu/cuda/kernels/element_types.h"

// Fused softmax + cross-entropy on the GPU, the twin of gpu/host/kernels/cross_entropy.h, for
// logits of T = float, __nv_bfloat16, __half (element_types.h). losses, lse, the mean loss and
// dlosses are fp32. A negative target masks its row out of the loss as on the host: loss and lse
// 0, a gradient row of zeros, its logits never read; *loss_mean is over the rows in the loss (0
// when none is), with the same bits as before masks existed when none is masked.
namespace strata::gpu::cuda::kernels {

// One block per row, the exponentials summed in double; *loss_mean by one block in double.
template <typename T>
cudaError_t cross_entropy_forward(cudaStream_t stream, float* losses, float* lse, float* loss_mean,
                                  const T* logits, const std::int32_t* targets, i64 rows, i64 vocab,
                                  i64 vocab_padded);
// OVERWRITES dlogits (the padded columns with 0), each element rounded once.
template <typename T>
cudaError_t cross_entropy_backward(cudaStream_t stream, T* dlogits, const T* logits,
                                   const float* lse, const std::int32_t* targets,
                                   const float* dlosses, i64 rows, i64 vocab, i64 vocab_padded);

// Both in one kernel, the gradient written over the logits: one block per row reads the row once
// for its maximum and sum (an online softmax: each thread rescales its running sum when its
// maximum grows, the sums in double), then once more to write the gradient in place. The target's
// logit is read before any element is written. lse's bits may differ from the two-pass forward's
// in the last place (the sums run in another order); *loss_mean as the forward's.
template <typename T>
cudaError_t cross_entropy_fused(cudaStream_t stream, T* logits, float* losses, float* lse,
                                float* loss_mean, const std::int32_t* targets, const float* dlosses,
                                i64 rows, i64 vocab, i64 vocab_padded);

}  // namespace strata::gpu::cuda::kernels

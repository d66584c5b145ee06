// The cross-entropy kernels; see cross_entropy.h.
#include "gpu/cuda/kernels/cross_entropy.h"

#include "gpu/cuda/kernels/common.cuh"
#include "gpu/cuda/kernels/element.cuh"

namespace strata::gpu::cuda::kernels {
namespace {

template <typename T>
__global__ void cross_entropy_forward_kernel(float* losses, float* lse, const T* logits,
                                             const std::int32_t* targets, i64 vocab,
                                             i64 vocab_padded) {
  __shared__ float max_scratch[threads_per_block / warp_size];
  __shared__ double sum_scratch[threads_per_block / warp_size];
  const i64 row = blockIdx.x;
  const i64 target = targets[row];
  if (target >= vocab) __trap();
  if (target < 0) {
    // Masked out of the loss: the whole block leaves before any barrier, its logits unread.
    if (threadIdx.x == 0) lse[row] = losses[row] = 0.0f;
    return;
  }
  const T* x = logits + row * vocab_padded;
  float max_logit = -INFINITY;
  for (i64 c = threadIdx.x; c < vocab; c += blockDim.x)
    max_logit = fmaxf(max_logit, widen(x[c]));
  max_logit = block_max(max_logit, max_scratch);
  double sum = 0.0;
  for (i64 c = threadIdx.x; c < vocab; c += blockDim.x)
    sum += expf(widen(x[c]) - max_logit);
  sum = block_sum(sum, sum_scratch);
  if (threadIdx.x == 0) {
    const double row_lse = static_cast<double>(max_logit) + log(sum);
    lse[row] = static_cast<float>(row_lse);
    losses[row] = static_cast<float>(row_lse - static_cast<double>(widen(x[target])));
  }
}

// The mean over the rows in the loss (a masked row's loss is 0 and adds nothing); the count is a
// sum of ones in double, exact, so with no row masked the division is by n as before masks existed.
__global__ void mean_kernel(float* mean, const float* values, const std::int32_t* targets, i64 n) {
  __shared__ double scratch[threads_per_block / warp_size];
  __shared__ double count_scratch[threads_per_block / warp_size];
  double sum = 0.0;
  double count = 0.0;
  for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
    sum += values[i];
    count += targets[i] >= 0 ? 1.0 : 0.0;
  }
  sum = block_sum(sum, scratch);
  count = block_sum(count, count_scratch);
  if (threadIdx.x == 0) *mean = count > 0.0 ? static_cast<float>(sum / count) : 0.0f;
}

template <typename T>
__global__ void cross_entropy_backward_kernel(T* dlogits, const T* logits, const float* lse,
                                              const std::int32_t* targets, const float* dlosses,
                                              i64 rows, i64 vocab, i64 vocab_padded) {
  for (i64 i = global_index(); i < rows * vocab_padded; i += global_stride()) {
    const i64 row = i / vocab_padded;
    const i64 c = i % vocab_padded;
    if (c >= vocab) {
      dlogits[i] = narrow<T>(0.0f);
      continue;
    }
    const i64 target = targets[row];
    if (target >= vocab) __trap();
    if (target < 0) {
      dlogits[i] = narrow<T>(0.0f);  // masked: no gradient, the logit unread
      continue;
    }
    const float indicator = c == target ? 1.0f : 0.0f;
    dlogits[i] = narrow<T>((expf(widen(logits[i]) - lse[row]) - indicator) * dlosses[row]);
  }
}

template <typename T>
__global__ void cross_entropy_fused_kernel(T* logits, float* losses, float* lse,
                                           const std::int32_t* targets, const float* dlosses,
                                           i64 vocab, i64 vocab_padded) {
  __shared__ float max_scratch[threads_per_block / warp_size];
  __shared__ double sum_scratch[threads_per_block / warp_size];
  const i64 row = blockIdx.x;
  const i64 target = targets[row];
  if (target >= vocab) __trap();
  T* x = logits + row * vocab_padded;
  if (target < 0) {
    // Masked: the block zeroes its row and leaves before any barrier, its logits unread.
    for (i64 c = threadIdx.x; c < vocab_padded; c += blockDim.x)
      x[c] = narrow<T>(0.0f);
    if (threadIdx.x == 0) lse[row] = losses[row] = 0.0f;
    return;
  }
  // Read before the barriers in block_max and block_sum, so before any thread writes the row.
  const float target_logit = threadIdx.x == 0 ? widen(x[target]) : 0.0f;
  float running_max = -INFINITY;
  double running_sum = 0.0;
  for (i64 c = threadIdx.x; c < vocab; c += blockDim.x) {
    const float value = widen(x[c]);
    // A -inf logit adds exp(-inf) = 0; taken through the update below while running_max is still
    // -inf, it would add expf(-inf - -inf) = NaN and poison the row.
    if (value == -INFINITY) continue;
    if (value > running_max) {
      running_sum *= exp(static_cast<double>(running_max) - static_cast<double>(value));
      running_max = value;
    }
    running_sum += expf(value - running_max);
  }
  const float row_max = block_max(running_max, max_scratch);
  // A thread that saw no column (or only -inf) adds nothing.
  const double mine =
      running_max == -INFINITY
          ? 0.0
          : running_sum * exp(static_cast<double>(running_max) - static_cast<double>(row_max));
  const double sum = block_sum(mine, sum_scratch);
  const double row_lse_double = static_cast<double>(row_max) + log(sum);
  const float row_lse = static_cast<float>(row_lse_double);
  if (threadIdx.x == 0) {
    lse[row] = row_lse;
    losses[row] = static_cast<float>(row_lse_double - static_cast<double>(target_logit));
  }
  const float dloss = dlosses[row];
  for (i64 c = threadIdx.x; c < vocab_padded; c += blockDim.x) {
    if (c >= vocab) {
      x[c] = narrow<T>(0.0f);
      continue;
    }
    const float indicator = c == target ? 1.0f : 0.0f;
    x[c] = narrow<T>((expf(widen(x[c]) - row_lse) - indicator) * dloss);
  }
}

}  // namespace

template <typename T>
cudaError_t cross_entropy_fused(cudaStream_t stream, T* logits, float* losses, float* lse,
                                float* loss_mean, const std::int32_t* targets, const float* dlosses,
                                i64 rows, i64 vocab, i64 vocab_padded) {
  if (rows > 0) {
    cross_entropy_fused_kernel<<<static_cast<unsigned>(rows), threads_per_block, 0, stream>>>(
        logits, losses, lse, targets, dlosses, vocab, vocab_padded);
  }
  mean_kernel<<<1, threads_per_block, 0, stream>>>(loss_mean, losses, targets, rows);
  return cudaGetLastError();
}

template <typename T>
cudaError_t cross_entropy_forward(cudaStream_t stream, float* losses, float* lse, float* loss_mean,
                                  const T* logits, const std::int32_t* targets, i64 rows, i64 vocab,
                                  i64 vocab_padded) {
  if (rows > 0) {
    cross_entropy_forward_kernel<<<static_cast<unsigned>(rows), threads_per_block, 0, stream>>>(
        losses, lse, logits, targets, vocab, vocab_padded);
  }
  mean_kernel<<<1, threads_per_block, 0, stream>>>(loss_mean, losses, targets, rows);
  return cudaGetLastError();
}

template <typename T>
cudaError_t cross_entropy_backward(cudaStream_t stream, T* dlogits, const T* logits,
                                   const float* lse, const std::int32_t* targets,
                                   const float* dlosses, i64 rows, i64 vocab, i64 vocab_padded) {
  if (rows * vocab_padded == 0) return cudaSuccess;
  cross_entropy_backward_kernel<<<blocks_for(rows * vocab_padded), threads_per_block, 0, stream>>>(
      dlogits, logits, lse, targets, dlosses, rows, vocab, vocab_padded);
  return cudaGetLastError();
}

#define STRATA_INSTANTIATE(T)                                                                      \
  template cudaError_t cross_entropy_forward<T>(cudaStream_t, float*, float*, float*, const T*,    \
                                                const std::int32_t*, i64, i64, i64);               \
  template cudaError_t cross_entropy_backward<T>(                                                  \
      cudaStream_t, T*, const T*, const float*, const std::int32_t*, const float*, i64, i64, i64); \
  template cudaError_t cross_entropy_fused<T>(cudaStream_t, T*, float*, float*, float*,            \
                                              const std::int32_t*, const float*, i64, i64, i64);
STRATA_CUDA_FOR_EACH_ELEMENT(STRATA_INSTANTIATE)
#undef STRATA_INSTANTIATE

}  // namespace strata::gpu::cuda::kernels

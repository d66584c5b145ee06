#pragma once

#include <cuda_runtime.h>

#include <cstdint>

// The CUDA kernels behind gpu::Ops (gpu/cuda/cuda_ops.cpp), one launcher per op. Each enqueues on
// `stream` and returns the launch's status (cudaGetLastError), never blocks. The math, saved
// tensors and conventions are those of gpu/host/kernels/*.h: backward kernels ACCUMULATE into
// their gradient outputs, except cross_entropy_backward, which overwrites. All data is fp32 in
// device memory except the casts' 16-bit sides, which are raw bf16/fp16 bit patterns.
//
// This header is plain C++17 (nvcc compiles kernels.cu as C++17) and includes no gpu/*.h.
namespace strata::gpu::cuda::kernels {

using i64 = std::int64_t;

// The most head_size attention_backward supports (each lane keeps head_size / 32 sums).
inline constexpr i64 attention_head_size_max = 256;

cudaError_t embedding_forward(cudaStream_t stream, float* out, const std::int32_t* tokens,
                              const float* wte, const float* wpe, i64 batch, i64 seq_len,
                              i64 channels, i64 vocab);
// dwte through atomicAdd (the order of the sums varies from run to run); dwpe without atomics.
cudaError_t embedding_backward(cudaStream_t stream, float* dwte, float* dwpe, const float* dout,
                               const std::int32_t* tokens, i64 batch, i64 seq_len, i64 channels,
                               i64 vocab);

// One warp per row, statistics summed in double as on the host.
cudaError_t layer_norm_forward(cudaStream_t stream, float* out, float* mean, float* rstd,
                               const float* inp, const float* weight, const float* bias, i64 rows,
                               i64 channels);
cudaError_t layer_norm_backward(cudaStream_t stream, float* dinp, float* dweight, float* dbias,
                                const float* dout, const float* inp, const float* weight,
                                const float* mean, const float* rstd, i64 rows, i64 channels);

// out[r, c] += bias[c] (the matmul's bias after cuBLAS).
cudaError_t add_bias(cudaStream_t stream, float* out, const float* bias, i64 rows, i64 columns);
// target[c] += sum over rows of source[r, c] (the matmul's dbias).
cudaError_t column_sums_accumulate(cudaStream_t stream, float* target, const float* source,
                                   i64 rows, i64 columns);

// Causal attention with att (batch, heads, seq_len, seq_len) materialised, one warp per query
// row, the row's scores in shared memory: memory grows with seq_len squared, where a fused
// memory-efficient kernel (FlashAttention's tiling) would keep it linear.
cudaError_t attention_forward(cudaStream_t stream, float* out, float* att, const float* qkv,
                              i64 batch, i64 seq_len, i64 channels, i64 heads);
// `row_sums` is scratch of batch * heads * seq_len floats (sum over t2 of att * datt per row).
cudaError_t attention_backward(cudaStream_t stream, float* dqkv, float* row_sums, const float* dout,
                               const float* qkv, const float* att, i64 batch, i64 seq_len,
                               i64 channels, i64 heads);

cudaError_t gelu_forward(cudaStream_t stream, float* out, const float* inp, i64 n);
cudaError_t gelu_backward(cudaStream_t stream, float* dinp, const float* inp, const float* dout,
                          i64 n);
cudaError_t residual_forward(cudaStream_t stream, float* out, const float* a, const float* b,
                             i64 n);
cudaError_t residual_backward(cudaStream_t stream, float* da, float* db, const float* dout, i64 n);

// One block per row; the exponentials summed in double; *loss_mean by one block in double.
cudaError_t cross_entropy_forward(cudaStream_t stream, float* losses, float* lse, float* loss_mean,
                                  const float* logits, const std::int32_t* targets, i64 rows,
                                  i64 vocab, i64 vocab_padded);
cudaError_t cross_entropy_backward(cudaStream_t stream, float* dlogits, const float* logits,
                                   const float* lse, const std::int32_t* targets,
                                   const float* dlosses, i64 rows, i64 vocab, i64 vocab_padded);

// Bit for bit the host's conversions (gpu/host/kernels/cast.h): round to nearest even, NaN stays
// NaN with the host's payload rule, fp16 subnormals kept.
cudaError_t cast_bf16_to_fp32(cudaStream_t stream, float* target, const std::uint16_t* source,
                              i64 n);
cudaError_t cast_fp16_to_fp32(cudaStream_t stream, float* target, const std::uint16_t* source,
                              i64 n);
cudaError_t cast_fp32_to_bf16(cudaStream_t stream, std::uint16_t* target, const float* source,
                              i64 n);
cudaError_t cast_fp32_to_fp16(cudaStream_t stream, std::uint16_t* target, const float* source,
                              i64 n);

// ---- the Llama family (llama_kernels.cu), mirroring gpu/host/kernels/{rms_norm,rope,swiglu,
// qkv_pack}.h.
// One warp per row, the sum of squares in double; dweight by column tiles.
cudaError_t rms_norm_forward(cudaStream_t stream, float* out, float* rstd, const float* inp,
                             const float* weight, double eps, i64 rows, i64 channels);
cudaError_t rms_norm_backward(cudaStream_t stream, float* dinp, float* dweight, const float* dout,
                              const float* inp, const float* weight, const float* rstd, i64 rows,
                              i64 channels);
// In place; one thread per (row, head, pair).
cudaError_t rope_forward(cudaStream_t stream, float* x, const float* inv_freq, i64 batch,
                         i64 seq_len, i64 heads, i64 head_dim, i64 row_stride);
cudaError_t rope_backward(cudaStream_t stream, float* dx, const float* inv_freq, i64 batch,
                          i64 seq_len, i64 heads, i64 head_dim, i64 row_stride);
cudaError_t swiglu_forward(cudaStream_t stream, float* out, const float* gate, const float* up,
                           i64 n);
cudaError_t swiglu_backward(cudaStream_t stream, float* dgate, float* dup, const float* dout,
                            const float* gate, const float* up, i64 n);
// The backward has one thread per element of dk/dv, summing its repeats in head order: no atomics.
cudaError_t qkv_pack_forward(cudaStream_t stream, float* qkv, const float* q, const float* k,
                             const float* v, i64 rows, i64 heads, i64 kv_heads, i64 head_dim);
cudaError_t qkv_pack_backward(cudaStream_t stream, float* dq, float* dk, float* dv,
                              const float* dqkv, i64 rows, i64 heads, i64 kv_heads, i64 head_dim);

cudaError_t fill(cudaStream_t stream, float* target, float value, i64 n);
cudaError_t accumulate(cudaStream_t stream, float* target, const float* source, float scale, i64 n);

}  // namespace strata::gpu::cuda::kernels

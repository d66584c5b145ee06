#pragma once

#include <cstdint>

// Causal multi-head self-attention from a fused qkv buffer, as llm.c's attention_forward and
// attention_backward, on host memory, materialising the T x T probabilities. It is the reference
// the fused kernel (flash_attention.h) is tested against: written the textbook way, one softmax
// row at a time, and itself checked against a scalar reference and finite differences. See
// embedding.h for the conventions shared by every kernel.
namespace strata::gpu::host::kernels {

// qkv: (batch, seq_len, 3 * channels): per position the query, key and value vectors, each
// `channels` wide and split into `heads` heads of head_size = channels / heads (heads must divide
// channels). For each batch b, head h and query position t, with scale = 1 / sqrt(head_size):
//   pre[t2] = scale * q[t] . k[t2] for t2 <= t (causal),
//   att[t, t2] = softmax over t2 <= t of pre (max subtracted first), 0 for t2 > t,
//   out[b, t, h * head_size + i] = sum over t2 of att[t, t2] * v[t2, i].
// Saves att: (batch, heads, seq_len, seq_len), which is what the backward needs besides qkv.
// Products go through BLAS per (batch, head) in blocks of 64 query rows, each block scoring only
// the keys it may see; rows are a fixed partition, so the bits do not depend on the thread count.
template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, std::int64_t batch,
                       std::int64_t seq_len, std::int64_t channels, std::int64_t heads);

// dqkv += gradient of out with respect to qkv given dout (batch, seq_len, channels), qkv and the
// att saved by the forward:
//   datt[t, t2] = dout[t] . v[t2];  dv[t2] += att[t, t2] * dout[t]
//   dpre[t, t2] = att[t, t2] * (datt[t, t2] - sum over t3 of att[t, t3] * datt[t, t3])
//   dq[t] += scale * sum over t2 of dpre[t, t2] * k[t2];  dk[t2] += scale * dpre[t, t2] * q[t]
// Each (batch, head) pair is one task that owns its slice of dqkv; its products run through
// single-threaded BLAS in fixed blocks of 64 positions, so there are no atomics and the bits do not
// depend on the thread count. Uses seq_len^2 elements of scratch per worker thread, allocated per
// call.
template <typename Real>
void attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* att,
                        std::int64_t batch, std::int64_t seq_len, std::int64_t channels,
                        std::int64_t heads);

}  // namespace strata::gpu::host::kernels

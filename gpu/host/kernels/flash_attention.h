#pragma once

#include <cstdint>

// Causal self-attention without the T x T probability matrix (FlashAttention-2's algorithm,
// Dao 2023), with grouped-query heads, on host memory. This is the host twin of gpu::Ops's
// attention; attention.h's materialised kernel is the reference it is tested against. See
// embedding.h for the conventions shared by every kernel.
namespace strata::gpu::host::kernels {

// qkv: (batch, seq_len, (heads + 2 * kv_heads) * head_dim): per position the `heads` query
// vectors, then `kv_heads` key vectors, then `kv_heads` value vectors, each head_dim wide. Query
// head h reads kv head h / (heads / kv_heads) (kv_heads must divide heads). For each batch b,
// query head h and position t, with scale = 1 / sqrt(head_dim):
//   s[t2] = scale * q[t] . k[t2] for t2 <= t (causal),
//   lse[b, h, t] = log(sum over t2 <= t of exp(s[t2])),
//   out[b, t, h * head_dim + i] = sum over t2 <= t of exp(s[t2] - lse) * v[t2, i].
// out is (batch, seq_len, heads * head_dim); lse is (batch, heads, seq_len), the only statistic the
// backward needs besides qkv and out. Every element of both is written.
// Each (batch, head, block of 64 query rows) is one task: it walks the key blocks it may see with
// a running maximum and sum (online softmax), rescaling its accumulated output when the maximum
// grows, so scratch is O(64 x 64 + 64 x head_dim) per task. Products run through single-threaded
// BLAS; the pieces depend on the shapes only, so the bits do not depend on the thread count.
// With `rows_alone` each query row is its own product, with the bits decode_attention gives it
// over a cache as long as seq_len (a block's product rounds a row unlike one row alone).
template <typename Real>
void flash_attention_forward(Real* out, Real* lse, const Real* qkv, std::int64_t batch,
                             std::int64_t seq_len, std::int64_t heads, std::int64_t kv_heads,
                             std::int64_t head_dim, bool rows_alone = false);

// dqkv += the gradient of out with respect to qkv given dout (batch, seq_len, heads * head_dim),
// qkv and the forward's out and lse. The probabilities are recomputed block by block:
//   delta[t] = dout[t] . out[t];  p[t, t2] = exp(scale * q[t] . k[t2] - lse[t]) for t2 <= t
//   dv[t2] += p[t, t2] * dout[t];  dp[t, t2] = dout[t] . v[t2];  ds = p * (dp - delta[t])
//   dq[t] += scale * sum over t2 of ds[t, t2] * k[t2];  dk[t2] += scale * sum of ds[t, t2] * q[t]
// A kv head's dk and dv sum over the query heads that read it: each (batch, kv head) pair is one
// task that owns that slice of dk and dv and its query heads' dq, walking heads, key blocks and
// query blocks in a fixed order, so there are no atomics and the bits do not depend on the thread
// count. Scratch is two 64 x 64 blocks and seq_len values per task.
template <typename Real>
void flash_attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* out,
                              const Real* lse, std::int64_t batch, std::int64_t seq_len,
                              std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim);

// One decode step's attention against a KV cache: for each sequence b, its new token's query
// heads (row b of qkv, laid out as above; only the q part is read) attend over positions
// [0, length[b]) of k_cache and v_cache, each (batch, kv_heads, max_seq, head_dim), the token's
// own k and v already there. out is (batch, heads * head_dim). The keys are folded in the
// forward's blocks of 64 with the same online softmax, the last block ending at the token's own
// position, so a row's output is the forward's for that position: to the bit when the forward
// computes each row alone (rows_alone, whose blocks end there too), up to the products' rounding
// against its blocks of 64 rows (OpenBLAS rounds a product of one query row differently from one
// of 64). Positions past length[b] are never read. One task per (sequence, head).
template <typename Real>
void decode_attention(Real* out, const Real* qkv, const Real* k_cache, const Real* v_cache,
                      const std::int32_t* length, std::int64_t batch, std::int64_t heads,
                      std::int64_t kv_heads, std::int64_t head_dim, std::int64_t max_seq);

}  // namespace strata::gpu::host::kernels

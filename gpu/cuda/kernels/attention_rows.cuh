#pragma once

// Where the attention kernels (attention.cu, attention_mma.cu) find a head's vector of one token:
// q, k and v in the fused qkv rows, out and dout in their (rows, heads x head_dim) layout, lse
// and delta at (batch, heads, seq_len).
#include <cmath>

#include "gpu/cuda/kernels/attention.h"

namespace strata::gpu::cuda::kernels {
namespace {

struct AttentionRows {
  AttentionShape shape;

  // The elements of one token's qkv row: heads + 2 kv_heads vectors of head_dim.
  __host__ __device__ i64 qkv_width() const {
    return (shape.heads + 2 * shape.kv_heads) * shape.head_dim;
  }
  // The kv head that query head `head` reads.
  __host__ __device__ i64 kv_head_of(i64 head) const {
    return head / (shape.heads / shape.kv_heads);
  }
  __host__ __device__ i64 token(i64 b, i64 t) const { return b * shape.seq_len + t; }

  // Offsets (in elements) into qkv or dqkv.
  __host__ __device__ i64 q(i64 b, i64 t, i64 head) const {
    return token(b, t) * qkv_width() + head * shape.head_dim;
  }
  __host__ __device__ i64 k(i64 b, i64 t, i64 kv_head) const {
    return token(b, t) * qkv_width() + (shape.heads + kv_head) * shape.head_dim;
  }
  __host__ __device__ i64 v(i64 b, i64 t, i64 kv_head) const {
    return k(b, t, kv_head) + shape.kv_heads * shape.head_dim;
  }
  // Offset into out or dout.
  __host__ __device__ i64 o(i64 b, i64 t, i64 head) const {
    return (token(b, t) * shape.heads + head) * shape.head_dim;
  }
  // The (batch, query head, position) of a row of lse or delta, rows ordered as `stat` orders
  // them.
  struct QueryRow {
    i64 b, head, t;
  };
  __host__ __device__ QueryRow query_row(i64 row) const {
    return {row / (shape.seq_len * shape.heads), (row / shape.seq_len) % shape.heads,
            row % shape.seq_len};
  }
  // Offset into lse or delta.
  __host__ __device__ i64 stat(i64 b, i64 head, i64 t) const {
    return (b * shape.heads + head) * shape.seq_len + t;
  }
};

// The softmax's scale, 1 / sqrt(head_dim), as the host twin computes it.
float attention_scale(i64 head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

}  // namespace
}  // namespace strata::gpu::cuda::kernels

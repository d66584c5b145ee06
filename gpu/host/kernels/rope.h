#pragma once

#include <cstdint>

// Rotary position embeddings as transformers applies them (apply_rotary_pos_emb with
// rotate_half), on host memory, in place.
namespace strata::gpu::host::kernels {

// For each of batch x seq_len rows (row r at x + r * row_stride, position t = r % seq_len, plus
// start[r / seq_len] when start is not null: where a decode step's sequence stands), each
// of `heads` heads of `head_dim` values laid out back to back, with the head's halves x1 = [0,
// D/2) and x2 = [D/2, D) and angle_j = t * inv_freq[j] (j < D/2, computed in fp32 as transformers
// does):
//   x1' = x1 cos - x2 sin,   x2' = x2 cos + x1 sin.
// In place: the rotation of a pair reads both values before writing either.
template <typename Real>
void rope_forward(Real* x, const float* inv_freq, std::int64_t batch, std::int64_t seq_len,
                  std::int64_t heads, std::int64_t head_dim, std::int64_t row_stride,
                  const std::int32_t* start = nullptr);

// The transpose of the rotation, in place on the gradient (the rotation is linear, so nothing of
// the forward is needed): dx1 = dy1 cos + dy2 sin, dx2 = dy2 cos - dy1 sin. Unlike the other
// backward kernels it overwrites, as the gradient it rotates is its own.
template <typename Real>
void rope_backward(Real* dx, const float* inv_freq, std::int64_t batch, std::int64_t seq_len,
                   std::int64_t heads, std::int64_t head_dim, std::int64_t row_stride);

}  // namespace strata::gpu::host::kernels

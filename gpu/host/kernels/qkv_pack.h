#pragma once

#include <cstdint>

// Grouped-query attention's inputs packed for the attention kernel, on host memory. See
// embedding.h for the conventions (backward accumulates).
namespace strata::gpu::host::kernels {

// For each of `rows` rows: qkv = [q (heads x D) | k (heads x D) | v (heads x D)], q copied and k,
// v each repeated from kv_heads heads to `heads` (transformers' repeat_kv: head h reads kv head
// h / (heads / kv_heads)). q is rows x heads x D; k and v rows x kv_heads x D.
template <typename Real>
void qkv_pack_forward(Real* qkv, const Real* q, const Real* k, const Real* v, std::int64_t rows,
                      std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim);

// dq += the q part of dqkv; dk and dv += the sum of the heads each kv head was repeated into, in
// head order.
template <typename Real>
void qkv_pack_backward(Real* dq, Real* dk, Real* dv, const Real* dqkv, std::int64_t rows,
                       std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim);

}  // namespace strata::gpu::host::kernels

#pragma once

#include <cstdint>

// Grouped-query attention's inputs packed for the attention kernel, on host memory. See
// embedding.h for the conventions (backward accumulates).
namespace strata::gpu::host::kernels {

// For each of `rows` rows: qkv = [q (heads x D) | k (kv_heads x D) | v (kv_heads x D)], each part
// copied as it is. k and v are not repeated over the query heads that share them (transformers'
// repeat_kv): the attention kernel reads query head h's kv head h / (heads / kv_heads) in place
// (flash_attention.h). q is rows x heads x D; k and v rows x kv_heads x D.
template <typename Real>
void qkv_pack_forward(Real* qkv, const Real* q, const Real* k, const Real* v, std::int64_t rows,
                      std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim);

// dq, dk and dv += the q, k and v parts of each row of dqkv: the attention kernel has already
// summed each kv head's gradient over the query heads that read it.
template <typename Real>
void qkv_pack_backward(Real* dq, Real* dk, Real* dv, const Real* dqkv, std::int64_t rows,
                       std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim);

}  // namespace strata::gpu::host::kernels

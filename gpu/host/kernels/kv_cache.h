#pragma once

#include <cstddef>
#include <cstdint>

// The KV cache's writes on host memory: gpu::Ops::kv_cache_write's host twin. See embedding.h for
// the conventions shared by every kernel.
namespace strata::gpu::host::kernels {

// For each sequence b, token t < tokens and kv head g: the k and v of qkv's row b * tokens + t
// (laid out as flash_attention.h's qkv: heads query vectors, then kv_heads keys, then kv_heads
// values, each head_dim wide) go to position start[b] + t of k_cache and v_cache, each
// (batch, kv_heads, max_seq, head_dim). A copy of `element_bytes`-wide elements, the same for
// every compute type: the bits move unchanged.
void kv_cache_write(std::byte* k_cache, std::byte* v_cache, const std::byte* qkv,
                    const std::int32_t* start, std::int64_t batch, std::int64_t tokens,
                    std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim,
                    std::int64_t max_seq, std::int64_t element_bytes);

}  // namespace strata::gpu::host::kernels

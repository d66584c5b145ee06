#include "gpu/host/kernels/kv_cache.h"

#include <cstring>

#include "base/assert.h"

namespace strata::gpu::host::kernels {

void kv_cache_write(std::byte* k_cache, std::byte* v_cache, const std::byte* qkv,
                    const std::int32_t* start, std::int64_t batch, std::int64_t tokens,
                    std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim,
                    std::int64_t max_seq, std::int64_t element_bytes) {
  STRATA_ASSERT(k_cache != nullptr && v_cache != nullptr && qkv != nullptr && start != nullptr);
  STRATA_ASSERT(batch >= 0 && tokens >= 0 && kv_heads > 0 && heads % kv_heads == 0);
  const std::int64_t qkv_stride = (heads + 2 * kv_heads) * head_dim;
  const auto head_bytes = static_cast<std::size_t>(head_dim * element_bytes);
  for (std::int64_t b = 0; b < batch; ++b) {
    STRATA_ASSERT(start[b] >= 0 && start[b] + tokens <= max_seq);
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::byte* row = qkv + (b * tokens + t) * qkv_stride * element_bytes;
      for (std::int64_t g = 0; g < kv_heads; ++g) {
        const std::int64_t at = ((b * kv_heads + g) * max_seq + start[b] + t) * head_dim;
        std::memcpy(k_cache + at * element_bytes, row + (heads + g) * head_dim * element_bytes,
                    head_bytes);
        std::memcpy(v_cache + at * element_bytes,
                    row + (heads + kv_heads + g) * head_dim * element_bytes, head_bytes);
      }
    }
  }
}

}  // namespace strata::gpu::host::kernels

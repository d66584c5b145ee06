#include "models/decoder/kv_cache.h"

#include "base/assert.h"
#include "gpu/device.h"
#include "gpu/ops.h"
#include "gpu/stream.h"
#include "models/activation_carver.h"

namespace strata::models {
namespace {

// Carves the cache's buffers in one order, for sizing and for the allocation alike.
void carve(ActivationCarver& carver, const DecoderSpec& spec, std::int64_t max_seq,
           gpu::DataType compute, gpu::Tensor& caches, std::int64_t& layer_elements,
           std::int32_t*& start, std::int32_t*& length, float*& scratch) {
  layer_elements = spec.batch * spec.kv_heads * max_seq * spec.head_dim;
  caches = carver.take(compute, 2 * spec.n_layer * layer_elements);
  start = carver.take<std::int32_t>(spec.batch);
  length = carver.take<std::int32_t>(spec.batch);
  scratch = carver.take<float>(
      gpu::decode_attention_scratch(spec.batch, spec.heads, spec.head_dim, max_seq));
}

}  // namespace

std::int64_t KvCache::bytes_needed(const DecoderSpec& spec, std::int64_t max_seq,
                                   gpu::DataType compute) {
  ActivationCarver counter(nullptr);
  KvCache sized_only;
  carve(counter, spec, max_seq, compute, sized_only.caches_, sized_only.layer_elements_,
        sized_only.start_, sized_only.length_, sized_only.scratch_);
  return counter.bytes();
}

KvCache::KvCache(gpu::Device& device, gpu::Stream& stream, const DecoderSpec& spec,
                 std::int64_t max_seq, gpu::DataType compute)
    : max_seq_(max_seq) {
  STRATA_ASSERT(max_seq > 0 && spec.kv_heads > 0 && spec.head_dim > 0);
  const std::int64_t bytes = bytes_needed(spec, max_seq, compute);
  storage_ = device.allocate(bytes, "KV cache");
  ActivationCarver carver(storage_.as<std::byte>());
  carve(carver, spec, max_seq, compute, caches_, layer_elements_, start_, length_, scratch_);
  stream.fill_zero(storage_.data(), bytes);
}

gpu::Tensor KvCache::keys(std::int64_t layer) const {
  return caches_.at(2 * layer * layer_elements_);
}

gpu::Tensor KvCache::values(std::int64_t layer) const {
  return caches_.at((2 * layer + 1) * layer_elements_);
}

}  // namespace strata::models

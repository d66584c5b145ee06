#pragma once

#include <cstdint>

#include "gpu/device_buffer.h"
#include "gpu/tensor.h"
#include "models/decoder/decoder_spec.h"

namespace strata::gpu {
class Device;
class Stream;
}  // namespace strata::gpu

namespace strata::models {

// Generation's keys and values (models/generate/): for each layer a k and a v cache of
// [batch, kv_heads, max_seq, head_dim] in the compute type (gpu::Ops::kv_cache_write), each
// sequence's first position and length for the pass that runs, and decode attention's scratch:
// one device allocation, zeroed when made (the decode attention reads positions past a sequence's
// end weighed 0, which must be finite).
class KvCache {
 public:
  KvCache(gpu::Device& device, gpu::Stream& stream, const DecoderSpec& spec, std::int64_t max_seq,
          gpu::DataType compute);
  // What the cache of `max_seq` positions per sequence takes on the device.
  static std::int64_t bytes_needed(const DecoderSpec& spec, std::int64_t max_seq,
                                   gpu::DataType compute);

  gpu::Tensor keys(std::int64_t layer) const;
  gpu::Tensor values(std::int64_t layer) const;
  std::int32_t* start() const { return start_; }    // (batch): each sequence's first position
  std::int32_t* length() const { return length_; }  // (batch): start + the pass's tokens
  float* scratch() const { return scratch_; }
  std::int64_t max_seq() const { return max_seq_; }

 private:
  KvCache() = default;  // for bytes_needed, which only sizes

  gpu::DeviceBuffer storage_;
  gpu::Tensor caches_;  // every layer's k then v, back to back
  std::int64_t layer_elements_ = 0;
  std::int32_t* start_ = nullptr;
  std::int32_t* length_ = nullptr;
  float* scratch_ = nullptr;
  std::int64_t max_seq_ = 0;
};

// What one forward of a decoder runs: the whole micro-batch (training and evaluation: no cache),
// or a pass of generation over `tokens` new positions of each sequence, from each one's start,
// their keys and values kept in `cache`. A pass of one token per sequence (a decode step) attends
// over the cache; a longer one (a prefill, every sequence from position 0) over its own tokens,
// through the fused attention.
struct ForwardPass {
  std::int64_t batch = 0;
  std::int64_t tokens = 0;  // per sequence
  KvCache* cache = nullptr;

  std::int64_t rows() const { return batch * tokens; }
  bool decode() const { return cache != nullptr && tokens == 1; }
  // Each sequence's first position on the device, or nullptr when every one starts at 0.
  const std::int32_t* start() const { return cache != nullptr ? cache->start() : nullptr; }
};

}  // namespace strata::models

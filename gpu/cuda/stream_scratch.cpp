#include "gpu/cuda/stream_scratch.h"

#include "base/assert.h"

namespace strata::gpu::cuda {

void* StreamScratch::get(Stream& stream, std::int64_t bytes) {
  STRATA_ASSERT(bytes >= 0);
  std::lock_guard lock(mutex_);
  DeviceBuffer& buffer = buffers_[&stream];
  if (!buffer || buffer.bytes() < bytes) {
    if (buffer) stream.synchronize();
    buffer.reset();
    buffer = device_.allocate(bytes > 0 ? bytes : 1, what_);
  }
  return buffer.data();
}

void StreamScratch::clear() {
  std::lock_guard lock(mutex_);
  buffers_.clear();
}

}  // namespace strata::gpu::cuda

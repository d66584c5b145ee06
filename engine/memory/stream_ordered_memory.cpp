#include "engine/memory/stream_ordered_memory.h"

#include "base/log.h"

namespace strata::engine::memory {

StreamOrderedMemory::~StreamOrderedMemory() {
  try {
    drain();
  } catch (const std::exception& error) {
    // The stream's own error is reported by whoever synchronizes it; the memory goes back anyway.
    base::logger("engine").debug("freeing device memory at shutdown: {}", error.what());
  }
}

gpu::DeviceBuffer StreamOrderedMemory::allocate(std::int64_t bytes, std::string_view what) {
  drain();
  return device_.allocate(bytes, what);
}

void StreamOrderedMemory::release(gpu::Stream& stream, gpu::DeviceBuffer buffer) {
  if (!buffer) return;
  Pending pending{device_.create_event(), std::move(buffer)};
  stream.record(*pending.done);
  pending_.push_back(std::move(pending));
}

void StreamOrderedMemory::drain() {
  while (!pending_.empty()) {
    Pending front = std::move(pending_.front());
    pending_.pop_front();
    front.done->synchronize();
  }
}

}  // namespace strata::engine::memory

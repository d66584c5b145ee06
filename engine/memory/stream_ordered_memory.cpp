#include "engine/memory/stream_ordered_memory.h"

#include <algorithm>
#include <utility>

#include "base/error.h"
#include "base/log.h"
#include "base/timeline.h"

namespace strata::engine::memory {

StreamOrderedMemory::~StreamOrderedMemory() {
  try {
    drain();
  } catch (const std::exception& error) {
    // The stream's own error is reported by whoever synchronizes it; the memory goes back anyway.
    base::logger("engine").debug("freeing device memory at shutdown: {}", error.what());
  }
}

gpu::DeviceBuffer StreamOrderedMemory::allocate(gpu::Stream& stream, std::int64_t bytes,
                                                std::string_view what,
                                                std::unique_ptr<gpu::Event>* released_at) {
  if (released_at != nullptr) released_at->reset();
  // The oldest match: its earlier use is the likeliest to have run.
  const auto match = std::ranges::find_if(pending_, [&](const Pending& pending) {
    return pending.stream == &stream && pending.buffer.bytes() == bytes;
  });
  if (match != pending_.end()) {
    Pending reused = std::move(*match);
    pending_.erase(match);
    pending_bytes_ -= bytes;
    if (released_at != nullptr && !reused.done->query()) *released_at = std::move(reused.done);
    note_peak();
    return std::move(reused.buffer);
  }
  reap();
  gpu::DeviceBuffer buffer;
  bool waited = false;
  for (;;) {
    try {
      buffer = device_.allocate(bytes, what);
      break;
    } catch (const UserError&) {
      if (pending_.empty()) throw;
    }
    // Over the budget only because released buffers are still held: free the oldest (the first
    // the device reaches), waiting for its release to run, and try again. The others stay for
    // later allocations of their sizes.
    Pending oldest = std::move(pending_.front());
    pending_.pop_front();
    pending_bytes_ -= oldest.buffer.bytes();
    if (!oldest.done->query()) {
      const base::Timeline::Scope waiting("host", "wait", "device memory");
      waited = true;
      oldest.done->synchronize();
    }
  }
  if (waited) ++waits_;
  note_peak();
  return buffer;
}

void StreamOrderedMemory::release(gpu::Stream& stream, gpu::DeviceBuffer buffer) {
  if (!buffer) return;
  pending_bytes_ += buffer.bytes();
  Pending pending{device_.create_event(), std::move(buffer), &stream};
  stream.record(*pending.done);
  pending_.push_back(std::move(pending));
}

std::int64_t StreamOrderedMemory::live_bytes() const {
  return device_.bytes_in_use() - pending_bytes_;
}

void StreamOrderedMemory::reap() {
  std::erase_if(pending_, [&](const Pending& pending) {
    if (!pending.done->query()) return false;
    pending_bytes_ -= pending.buffer.bytes();
    return true;
  });
}

void StreamOrderedMemory::drain() {
  const base::Timeline::Scope waiting("host", "wait", "device memory");
  while (!pending_.empty()) {
    Pending front = std::move(pending_.front());
    pending_.pop_front();
    pending_bytes_ -= front.buffer.bytes();
    front.done->synchronize();
  }
}

}  // namespace strata::engine::memory

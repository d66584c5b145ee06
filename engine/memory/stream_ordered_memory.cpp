#include "engine/memory/stream_ordered_memory.h"

#include <algorithm>
#include <utility>

#include "base/assert.h"
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
  // The oldest match: its earlier use is the likeliest to have run. One released on another
  // stream qualifies once that stream has passed the release.
  const auto match = std::ranges::find_if(pending_, [&](const Pending& pending) {
    return pending.buffer.bytes() == bytes && (pending.stream == &stream || pending.done->query());
  });
  if (match != pending_.end()) {
    Pending reused = std::move(*match);
    pending_.erase(match);
    pending_bytes_ -= bytes;
    if (released_at != nullptr && !reused.done->query()) *released_at = std::move(reused.done);
    note_peak();
    return std::move(reused.buffer);
  }
  gpu::DeviceBuffer buffer;
  bool waited = false;
  for (;;) {
    try {
      buffer = device_.allocate(bytes, what);
      break;
    } catch (const UserError&) {
      if (pending_.empty() && !(reclaim_ && reclaim_())) throw;
    }
    STRATA_ASSERT(!pending_.empty());  // a reclaimed buffer is released into pending_
    // Over the budget only because released buffers are still held: free one whose release
    // has run, else the oldest (the first the device reaches) once it has, and try again. The
    // others stay for later allocations of their sizes.
    auto done = std::ranges::find_if(pending_, [](const Pending& p) { return p.done->query(); });
    Pending freed = std::move(done != pending_.end() ? *done : pending_.front());
    pending_.erase(done != pending_.end() ? done : pending_.begin());
    pending_bytes_ -= freed.buffer.bytes();
    if (!freed.done->query()) {
      const base::Timeline::Scope waiting("host", "wait", "device memory");
      waited = true;
      freed.done->synchronize();
    }
  }
  if (waited) ++waits_;
  ++fresh_;
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

#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string_view>

#include "gpu/device.h"

namespace strata::engine::memory {

// Device memory that comes and goes with the step (gathered parameters, gradient buffers of the
// modules in flight), given back in stream order: a released buffer is free for later work on
// the stream it was released on at once, and for anything else once that stream has run the work
// enqueued before the release (cudaFreeAsync's rule, kept on any backend with an event).
//
// So the host never waits for the device to allocate, unless the budget says so: an allocation
// on a stream takes a released buffer of exactly its size from that stream, or from another
// stream that has passed its release (the modules of a transformer repeat their sizes, so after
// the first step a step allocates nothing new), else fresh memory. Released buffers are kept for
// their size until the budget refuses fresh memory: then they are freed, those whose release has
// run first, then the oldest once its release has run, until the new buffer fits. Past those,
// a cache a client keeps in this memory (the gathered modules the parameter coordinator keeps for
// reuse) gives its entries back through the reclaimer before the budget's error is let through.
//
// The memory in use is counted in stream order: the bytes of the buffers not released
// (`live_bytes`), whatever the host holds for releases the device has not reached yet. That is
// what a stream-ordered pool on a GPU holds, the live set the step's walk predicts (`strata
// estimate` checks its peak to the byte), and the same at a roomy budget as at a tight one.
//
// Not thread-safe: the engine's thread drives it.
class StreamOrderedMemory {
 public:
  explicit StreamOrderedMemory(gpu::Device& device) : device_(device) {}
  ~StreamOrderedMemory();
  StreamOrderedMemory(const StreamOrderedMemory&) = delete;
  StreamOrderedMemory& operator=(const StreamOrderedMemory&) = delete;

  // Device memory of `bytes` for work on `stream`; throws the device's budget UserError when it
  // does not fit even with every release run. When it is a buffer released on `stream` before,
  // and `released_at` is not null, *released_at is set to an event that fires when the buffer's
  // earlier use has run: work on another stream must wait for it before it touches the buffer
  // (null for memory that was free already).
  gpu::DeviceBuffer allocate(gpu::Stream& stream, std::int64_t bytes, std::string_view what,
                             std::unique_ptr<gpu::Event>* released_at = nullptr);
  // Frees `buffer` once `stream` has run the work enqueued on it so far.
  void release(gpu::Stream& stream, gpu::DeviceBuffer buffer);
  // Frees every pending buffer, waiting for its stream.
  void drain();
  // Called when the budget has no room and no released buffer is left to free: it releases one
  // buffer a client keeps only as a cache (through release()) and returns true, or returns false
  // when it has none. One at a time; an empty function unsets it.
  void set_reclaimer(std::function<bool()> reclaim) { reclaim_ = std::move(reclaim); }

  // Device memory in use in stream order: what the device holds, less the released buffers
  // still held for their streams; and its highest value since reset_peak().
  std::int64_t live_bytes() const;
  std::int64_t peak_bytes() const noexcept { return peak_; }
  void reset_peak() { peak_ = live_bytes(); }
  // Allocations that had to wait for the device (the budget refused fresh memory while released
  // buffers were held), for tests and the metrics.
  std::int64_t waits() const noexcept { return waits_; }
  // Allocations that took fresh device memory (tests: none after a first pass of repeated sizes).
  std::int64_t fresh_allocations() const noexcept { return fresh_; }

 private:
  struct Pending {
    std::unique_ptr<gpu::Event> done;
    gpu::DeviceBuffer buffer;
    const gpu::Stream* stream = nullptr;
  };
  void note_peak() { peak_ = std::max(peak_, live_bytes()); }

  gpu::Device& device_;
  std::deque<Pending> pending_;
  std::int64_t pending_bytes_ = 0;
  std::int64_t peak_ = 0;
  std::int64_t waits_ = 0;
  std::int64_t fresh_ = 0;
  std::function<bool()> reclaim_;
};

}  // namespace strata::engine::memory

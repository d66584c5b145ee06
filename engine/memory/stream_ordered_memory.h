#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/device.h"

namespace strata::engine::memory {

// Device memory that comes and goes with the step (gathered parameters, gradient buffers of the
// modules in flight), given back in stream order: a released buffer is free for later work on
// the stream it was released on at once, and for work on another stream once that stream has
// run the work enqueued before the release (cudaFreeAsync's rule, kept on any backend with an
// event).
//
// The engine reserves the step's memory up front (`reserve`): one device allocation, the arena,
// sized to the step's highest live set as the estimate counts it plus one largest buffer against
// fragmentation. An allocation is then carved from the arena's free ranges (the smallest that
// fits) and a release puts its range back, merged with its free neighbours, carrying the event
// its stream records: the host neither allocates device memory nor waits for the device inside a
// step. A range released on the allocating stream is reused at once; one released on another
// stream is ordered on the device (the allocating stream waits on the release's event). So that
// the compute stream does not wait for a copy it could run beside (a module's gradients going
// down while the next module's backward runs), a range released on another stream stays apart
// from its free neighbours until that stream has passed the release, and an allocation takes the
// smallest range it need not wait for, when one fits. An allocation the arena cannot place (no
// reserve, or more fragmentation than its slack) takes fresh device memory, counted in
// `fresh_allocations`. (The host backend's debug check that a
// device pointer lies in a live allocation sees the whole arena as one: a use after release()
// inside it is not caught there.)
//
// Outside the arena, released buffers are kept for their size and reused by later allocations of
// exactly that size (the modules of a transformer repeat their sizes) until the budget refuses
// fresh memory: then they are freed, those whose release has run first, then the oldest once its
// release has run (a host wait, counted in `waits`), until the new buffer fits. Past those, a
// cache a client keeps in this memory (the gathered modules the parameter coordinator keeps for
// reuse) gives its entries back through the reclaimer before the budget's error is let through.
//
// The memory in use is counted in stream order: the bytes of the buffers not released
// (`live_bytes`), whatever the host holds for releases the device has not reached yet and however
// much the arena reserves. That is what a stream-ordered pool on a GPU holds, the live set the
// estimate counts by running the step on a counting device in this same memory (`strata
// estimate` reports its peak to the byte), and the same at a roomy budget as at a tight one.
//
// Not thread-safe: the engine's thread drives it.
class StreamOrderedMemory {
 public:
  explicit StreamOrderedMemory(gpu::Device& device) : device_(device) {}
  ~StreamOrderedMemory();
  StreamOrderedMemory(const StreamOrderedMemory&) = delete;
  StreamOrderedMemory& operator=(const StreamOrderedMemory&) = delete;

  // Takes `bytes` of device memory as the arena later allocations are carved from (once, before
  // the first step; released buffers held outside it are freed first). Throws the device's
  // budget UserError when the budget has no room for it.
  void reserve(std::int64_t bytes);
  // The device memory reserve(bytes) takes (rounded up to the alignment).
  static std::int64_t arena_bytes(std::int64_t bytes);
  // The arena's size (0 before reserve).
  std::int64_t reserved_bytes() const noexcept { return arena_.bytes(); }

  // Device memory of `bytes` for work on `stream`, 256-byte aligned; throws the device's budget
  // UserError when it does not fit even with every release run. When its memory was released
  // before and `released_at` is not null, *released_at is set to an event that fires when that
  // earlier use has run: work on another stream must wait for it before it touches the buffer
  // (null for memory that was free already).
  gpu::DeviceBuffer allocate(gpu::Stream& stream, std::int64_t bytes, std::string_view what,
                             std::shared_ptr<gpu::Event>* released_at = nullptr);
  // allocate() for work that may be left undone (a prefetch): the memory there is room for now,
  // else an empty buffer. It drops no client's cache, waits for nothing and throws no budget
  // error. It takes a range no release still guards when one fits, since the work that fills it
  // may run on another stream than `stream` (a copy made ahead). `bytes` > 0.
  gpu::DeviceBuffer try_allocate(gpu::Stream& stream, std::int64_t bytes, std::string_view what,
                                 std::shared_ptr<gpu::Event>* released_at = nullptr);
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
  void reset_peak();

  // From now on, keeps what each buffer taken is for, so that peak_set() can say which of them
  // were live at the peak: the memory estimate's parts of the step's peak. Off in the engine (it
  // keeps a record of every allocation and release).
  void keep_peak_set() { keeps_peak_set_ = true; }
  struct LiveBuffer {
    std::string what;  // as allocate() was told
    std::int64_t bytes = 0;
  };
  // The buffers taken since keep_peak_set() that were live when the peak was first reached, in
  // the order they were taken.
  std::vector<LiveBuffer> peak_set() const;
  // Allocations that had to wait for the device (the budget refused fresh memory while released
  // buffers were held), for tests and the metrics.
  std::int64_t waits() const noexcept { return waits_; }
  // Allocations that took fresh device memory (tests: none after a first pass of repeated sizes,
  // none at all once the arena is reserved).
  std::int64_t fresh_allocations() const noexcept { return fresh_; }

 private:
  struct Pending {
    std::shared_ptr<gpu::Event> done;
    gpu::DeviceBuffer buffer;
    const gpu::Stream* stream = nullptr;
  };
  // A stream's release of arena memory: the memory is free for other streams once `done` fires.
  // `order` tells which of two releases on one stream came later (its event fires last).
  struct Release {
    const gpu::Stream* stream = nullptr;
    std::shared_ptr<gpu::Event> done;
    std::uint64_t order = 0;
  };
  struct FreeRange {
    std::int64_t bytes = 0;
    std::vector<Release> releases;  // at most one per stream: the latest
  };
  // Gives an arena buffer dropped without release() back at once (BasicBuffer's rule: whoever
  // drops it has made sure no queued work touches it).
  struct ArenaOwner final : gpu::detail::AllocationOwner {
    explicit ArenaOwner(StreamOrderedMemory& memory) : memory_(memory) {}
    void release(void* data, std::int64_t bytes) noexcept override;
    StreamOrderedMemory& memory_;
  };

  // Which releases a range may still have pending to be taken (smallest_fit).
  enum class Guard { none, own, any };
  // allocate() and try_allocate() (`quiet`): find_room, and the buffer noted for peak_set().
  gpu::DeviceBuffer take(gpu::Stream& stream, std::int64_t bytes, std::string_view what,
                         std::shared_ptr<gpu::Event>* released_at, bool quiet);
  gpu::DeviceBuffer find_room(gpu::Stream& stream, std::int64_t bytes, std::string_view what,
                              std::shared_ptr<gpu::Event>* released_at, bool quiet);
  gpu::DeviceBuffer carve(gpu::Stream& stream, std::int64_t bytes,
                          std::shared_ptr<gpu::Event>* released_at, bool unguarded_first);
  void free_range(std::int64_t offset, std::int64_t bytes, std::vector<Release> releases);
  std::map<std::int64_t, FreeRange>::iterator smallest_fit(std::int64_t size, Guard guard,
                                                           const gpu::Stream* stream = nullptr);
  void merge_settled();
  void merge_all();
  std::int64_t arena_offset(const void* data) const;
  void note_peak() { peak_ = std::max(peak_, live_bytes()); }
  // With keep_peak_set(): a buffer taken (bytes > 0; `new_peak` when taking it raised the peak)
  // or released (bytes 0).
  struct Taken {
    const void* data = nullptr;
    std::int64_t bytes = 0;
    std::string what;
  };
  void note_taken(const void* data, std::int64_t bytes, std::string_view what, bool new_peak);

  gpu::Device& device_;
  gpu::DeviceBuffer arena_;
  ArenaOwner arena_owner_{*this};
  std::map<std::int64_t, FreeRange> free_;  // by offset into the arena
  std::int64_t arena_live_bytes_ = 0;       // asked for by the arena's live buffers
  std::uint64_t releases_ = 0;
  std::deque<Pending> pending_;
  std::int64_t pending_bytes_ = 0;
  std::int64_t peak_ = 0;
  std::int64_t waits_ = 0;
  std::int64_t fresh_ = 0;
  std::function<bool()> reclaim_;
  bool keeps_peak_set_ = false;
  std::vector<Taken> taken_;
  std::size_t taken_at_peak_ = 0;  // the entries of taken_ up to the peak
};

}  // namespace strata::engine::memory

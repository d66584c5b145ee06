#include "engine/memory/stream_ordered_memory.h"

#include <algorithm>
#include <utility>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timeline.h"

namespace strata::engine::memory {

namespace {

// cudaMalloc's alignment, which the kernels (vector loads) and the host backend's checks assume.
constexpr std::int64_t kAlignment = 256;

std::int64_t aligned(std::int64_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

}  // namespace

StreamOrderedMemory::~StreamOrderedMemory() {
  try {
    drain();
  } catch (const std::exception& error) {
    // The stream's own error is reported by whoever synchronizes it; the memory goes back anyway.
    base::logger("engine").debug("freeing device memory at shutdown: {}", error.what());
  }
}

std::int64_t StreamOrderedMemory::arena_bytes(std::int64_t bytes) {
  return aligned(bytes);
}

void StreamOrderedMemory::reserve(std::int64_t bytes) {
  STRATA_ASSERT(!arena_ && bytes > 0);
  drain();  // buffers held outside the arena give their room to it
  arena_ = device_.allocate(arena_bytes(bytes), "the step's device memory (its arena)");
  ++fresh_;
  free_.emplace(0, FreeRange{arena_.bytes(), {}});
}

gpu::DeviceBuffer StreamOrderedMemory::allocate(gpu::Stream& stream, std::int64_t bytes,
                                                std::string_view what,
                                                std::shared_ptr<gpu::Event>* released_at) {
  return take(stream, bytes, what, released_at, false);
}

gpu::DeviceBuffer StreamOrderedMemory::try_allocate(gpu::Stream& stream, std::int64_t bytes,
                                                    std::string_view what,
                                                    std::shared_ptr<gpu::Event>* released_at) {
  STRATA_ASSERT(bytes > 0);
  return take(stream, bytes, what, released_at, true);
}

void StreamOrderedMemory::reset_peak() {
  peak_ = live_bytes();
  taken_at_peak_ = taken_.size();
}

void StreamOrderedMemory::note_taken(const void* data, std::int64_t bytes, std::string_view what,
                                     bool new_peak) {
  if (!keeps_peak_set_ || data == nullptr) return;
  taken_.push_back(Taken{data, bytes, std::string(what)});
  if (new_peak) taken_at_peak_ = taken_.size();
}

std::vector<StreamOrderedMemory::LiveBuffer> StreamOrderedMemory::peak_set() const {
  std::map<const void*, std::size_t> live;  // data -> its entry in taken_
  for (std::size_t i = 0; i < taken_at_peak_; ++i) {
    if (taken_[i].bytes > 0) {
      live[taken_[i].data] = i;
    } else {
      live.erase(taken_[i].data);
    }
  }
  std::vector<std::size_t> order;
  for (const auto& [data, entry] : live)
    order.push_back(entry);
  std::ranges::sort(order);
  std::vector<LiveBuffer> set;
  for (std::size_t entry : order)
    set.push_back(LiveBuffer{taken_[entry].what, taken_[entry].bytes});
  return set;
}

gpu::DeviceBuffer StreamOrderedMemory::take(gpu::Stream& stream, std::int64_t bytes,
                                            std::string_view what,
                                            std::shared_ptr<gpu::Event>* released_at, bool quiet) {
  const std::int64_t peak_before = peak_;
  gpu::DeviceBuffer buffer = find_room(stream, bytes, what, released_at, quiet);
  note_taken(buffer.data(), buffer.bytes(), what, peak_ > peak_before);
  return buffer;
}

gpu::DeviceBuffer StreamOrderedMemory::find_room(gpu::Stream& stream, std::int64_t bytes,
                                                 std::string_view what,
                                                 std::shared_ptr<gpu::Event>* released_at,
                                                 bool quiet) {
  if (released_at != nullptr) released_at->reset();
  if (bytes == 0) return {};  // as Device::allocate: an empty buffer, nothing carved
  bool waited = false;
  for (;;) {
    if (arena_) {
      gpu::DeviceBuffer carved = carve(stream, bytes, released_at, quiet);
      if (carved) return carved;
    }
    // The oldest match: its earlier use is the likeliest to have run. One released on another
    // stream qualifies once that stream has passed the release.
    const auto match = std::ranges::find_if(pending_, [&](const Pending& pending) {
      return pending.buffer.bytes() == bytes &&
             (pending.stream == &stream || pending.done->query());
    });
    if (match != pending_.end()) {
      Pending reused = std::move(*match);
      pending_.erase(match);
      pending_bytes_ -= bytes;
      if (released_at != nullptr && !reused.done->query()) *released_at = std::move(reused.done);
      note_peak();
      return std::move(reused.buffer);
    }
    try {
      gpu::DeviceBuffer buffer = device_.allocate(bytes, what);
      if (waited) ++waits_;
      ++fresh_;
      note_peak();
      return buffer;
    } catch (const UserError&) {
      if (quiet) return {};  // neither a client's cache nor a wait for the device buys it room
      if (pending_.empty()) {
        // A cache given back goes to the arena or to pending_: try both again.
        if (reclaim_ && reclaim_()) continue;
        throw;
      }
    }
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
}

// The smallest free range that fits (best fit keeps the large ranges whole for the large
// modules); its earlier users are ordered before the new one on the device, not on the host.
gpu::DeviceBuffer StreamOrderedMemory::carve(gpu::Stream& stream, std::int64_t bytes,
                                             std::shared_ptr<gpu::Event>* released_at,
                                             bool unguarded_first) {
  const std::int64_t size = aligned(bytes);
  merge_settled();
  auto best = free_.end();
  if (unguarded_first) best = smallest_fit(size, Guard::none);
  if (best == free_.end()) best = smallest_fit(size, Guard::own, &stream);
  if (best == free_.end()) best = smallest_fit(size, Guard::any);
  if (best == free_.end()) {
    // Ranges kept apart for their releases: whole again, at the price of waiting for them.
    merge_all();
    best = smallest_fit(size, Guard::any);
  }
  if (best == free_.end()) return {};

  // The orderings first (they may throw), then the range is taken.
  std::shared_ptr<gpu::Event> own;  // the latest release on `stream`: fires after the others
  std::uint64_t own_order = 0;
  bool foreign = false;
  for (const Release& release : best->second.releases) {
    if (release.done->query()) continue;
    if (release.stream == &stream) {
      if (!own || release.order > own_order) {
        own = release.done;
        own_order = release.order;
      }
      continue;
    }
    stream.wait(*release.done);
    foreign = true;
  }
  if (released_at != nullptr) {
    if (foreign) {
      // Another stream's use is ordered before `stream`'s next work only: one event after it.
      std::shared_ptr<gpu::Event> after = device_.create_event();
      stream.record(*after);
      *released_at = std::move(after);
    } else {
      *released_at = std::move(own);
    }
  }

  const std::int64_t offset = best->first;
  FreeRange taken = std::move(best->second);
  free_.erase(best);
  // The rest of the range stays free; its releases still guard it (conservative: they may cover
  // only the part taken).
  if (taken.bytes > size) {
    free_.emplace(offset + size, FreeRange{taken.bytes - size, std::move(taken.releases)});
  }
  arena_live_bytes_ += bytes;
  note_peak();
  return gpu::DeviceBuffer(arena_.as<std::byte>() + offset, bytes, &arena_owner_);
}

namespace {

// Of `releases`, per stream, the latest one not yet passed.
template <class Release>
std::vector<Release> latest_pending(std::vector<Release> releases) {
  std::vector<Release> kept;
  for (Release& release : releases) {
    if (release.done->query()) continue;
    auto same = std::ranges::find(kept, release.stream, &Release::stream);
    if (same == kept.end()) {
      kept.push_back(std::move(release));
    } else if (release.order > same->order) {
      *same = std::move(release);
    }
  }
  return kept;
}

// Whether two ranges' pending releases are on the same streams: merged, neither makes a stream
// wait that the other would not have.
template <class Release>
bool same_streams(const std::vector<Release>& a, const std::vector<Release>& b) {
  const auto all_in = [](const std::vector<Release>& from, const std::vector<Release>& in) {
    return std::ranges::all_of(from, [&](const Release& r) {
      return std::ranges::find(in, r.stream, &Release::stream) != in.end();
    });
  };
  return all_in(a, b) && all_in(b, a);
}

}  // namespace

// The smallest free range of at least `size` bytes among those `guard` allows: whose releases
// have all passed (none), or all but those on `stream` (own: work on `stream` need not wait for
// another stream), or any.
std::map<std::int64_t, StreamOrderedMemory::FreeRange>::iterator StreamOrderedMemory::smallest_fit(
    std::int64_t size, Guard guard, const gpu::Stream* stream) {
  auto best = free_.end();
  for (auto range = free_.begin(); range != free_.end(); ++range) {
    if (range->second.bytes < size) continue;
    if (best != free_.end() && range->second.bytes >= best->second.bytes) continue;
    if (guard != Guard::any &&
        std::ranges::any_of(range->second.releases, [&](const Release& release) {
          return (guard == Guard::none || release.stream != stream) && !release.done->query();
        }))
      continue;
    best = range;
  }
  return best;
}

// Neighbours whose pending releases are now on the same streams (those that kept them apart have
// passed) become one range.
void StreamOrderedMemory::merge_settled() {
  for (auto range = free_.begin(); range != free_.end();) {
    range->second.releases = latest_pending(std::move(range->second.releases));
    auto next = std::next(range);
    if (next == free_.end()) break;
    next->second.releases = latest_pending(std::move(next->second.releases));
    if (range->first + range->second.bytes == next->first &&
        same_streams(range->second.releases, next->second.releases)) {
      range->second.bytes += next->second.bytes;
      range->second.releases.insert(range->second.releases.end(), next->second.releases.begin(),
                                    next->second.releases.end());
      range->second.releases = latest_pending(std::move(range->second.releases));
      free_.erase(next);
      continue;
    }
    range = next;
  }
}

// Every pair of neighbours becomes one range, guarded by both ranges' releases.
void StreamOrderedMemory::merge_all() {
  for (auto range = free_.begin(); range != free_.end();) {
    auto next = std::next(range);
    if (next == free_.end()) break;
    if (range->first + range->second.bytes != next->first) {
      range = next;
      continue;
    }
    range->second.bytes += next->second.bytes;
    range->second.releases.insert(range->second.releases.end(), next->second.releases.begin(),
                                  next->second.releases.end());
    range->second.releases = latest_pending(std::move(range->second.releases));
    free_.erase(next);
  }
}

// Puts a range back, merged with the free neighbours whose pending releases are on the same
// streams as its own (a range released on the copy stream stays apart from one free for the
// compute stream until the copy has passed it: merge_settled then joins them); of their releases
// it keeps, per stream, the latest one not yet passed.
void StreamOrderedMemory::free_range(std::int64_t offset, std::int64_t bytes,
                                     std::vector<Release> releases) {
  releases = latest_pending(std::move(releases));
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + bytes == next->first) {
    next->second.releases = latest_pending(std::move(next->second.releases));
    if (same_streams(releases, next->second.releases)) {
      bytes += next->second.bytes;
      releases.insert(releases.end(), next->second.releases.begin(), next->second.releases.end());
      releases = latest_pending(std::move(releases));
      next = free_.erase(next);
    }
  }
  if (next != free_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second.bytes == offset) {
      previous->second.releases = latest_pending(std::move(previous->second.releases));
      if (same_streams(releases, previous->second.releases)) {
        offset = previous->first;
        bytes += previous->second.bytes;
        releases.insert(releases.end(), previous->second.releases.begin(),
                        previous->second.releases.end());
        free_.erase(previous);
      }
    }
  }
  const bool placed =
      free_.emplace(offset, FreeRange{bytes, latest_pending(std::move(releases))}).second;
  STRATA_ASSERT(placed);  // a range is freed once
}

std::int64_t StreamOrderedMemory::arena_offset(const void* data) const {
  const auto* base = arena_.as<const std::byte>();
  const auto* at = static_cast<const std::byte*>(data);
  if (base == nullptr || at < base || at >= base + arena_.bytes()) return -1;
  return at - base;
}

void StreamOrderedMemory::ArenaOwner::release(void* data, std::int64_t bytes) noexcept {
  const std::int64_t offset = memory_.arena_offset(data);
  STRATA_ASSERT(offset >= 0);
  memory_.arena_live_bytes_ -= bytes;
  memory_.note_taken(data, 0, {}, false);
  memory_.free_range(offset, aligned(bytes), {});
}

void StreamOrderedMemory::release(gpu::Stream& stream, gpu::DeviceBuffer buffer) {
  if (!buffer) return;
  note_taken(buffer.data(), 0, {}, false);
  std::shared_ptr<gpu::Event> done = device_.create_event();
  stream.record(*done);
  const std::int64_t offset = arena_offset(buffer.data());
  if (offset >= 0) {
    const std::int64_t bytes = buffer.bytes();
    buffer.disown();
    arena_live_bytes_ -= bytes;
    free_range(offset, aligned(bytes), {Release{&stream, std::move(done), ++releases_}});
    return;
  }
  pending_bytes_ += buffer.bytes();
  pending_.push_back(Pending{std::move(done), std::move(buffer), &stream});
}

std::int64_t StreamOrderedMemory::live_bytes() const {
  return device_.bytes_in_use() - pending_bytes_ - arena_.bytes() + arena_live_bytes_;
}

void StreamOrderedMemory::drain() {
  const base::Timeline::Scope waiting("host", "wait", "device memory");
  while (!pending_.empty()) {
    Pending front = std::move(pending_.front());
    pending_.pop_front();
    pending_bytes_ -= front.buffer.bytes();
    front.done->synchronize();
  }
  for (auto& [offset, range] : free_) {
    for (const Release& release : range.releases)
      release.done->synchronize();
    range.releases.clear();
  }
}

}  // namespace strata::engine::memory

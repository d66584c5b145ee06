// Stream-ordered device memory: a buffer released on a stream is reused by the next allocation
// of its size on that stream, and other sizes take fresh memory, without the host waiting for
// the device unless the budget says so; released buffers stay until the budget needs them; the
// memory in use is counted in stream order. With an arena reserved, any size is carved from the
// released ranges, ordered on the device, never waited for on the host.
#include "engine/memory/stream_ordered_memory.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "gpu/event.h"
#include "gpu/open_device.h"
#include "gpu/stream.h"
#include "tests/gpu/device_test_util.h"

namespace strata::engine::memory {
namespace {

using namespace std::chrono_literals;

// Holds a stream at a task until opened, so that the host can be seen not to wait for it.
struct HeldStream : gpu::testing::Gate {
  explicit HeldStream(gpu::Stream& stream) { stream.launch(waiter()); }
};

// An arena of three 64 KiB ranges on a host device, two of them taken on the compute stream:
// `first` (whose address `first_address` keeps) and `other`; the third is free.
struct ThreeRanges {
  ThreeRanges() : device(gpu::create_host_device({})), memory(*device) {
    memory.reserve(3 << 16);
    first = memory.allocate(device->compute_stream(), 1 << 16, "first");
    other = memory.allocate(device->compute_stream(), 1 << 16, "other");
    first_address = first.data();
  }
  std::unique_ptr<gpu::Device> device;
  StreamOrderedMemory memory;
  gpu::DeviceBuffer first;
  gpu::DeviceBuffer other;
  void* first_address = nullptr;
};

// A host device whose budget is 96 KiB.
std::unique_ptr<gpu::Device> device_of_96_kib() {
  gpu::DeviceOptions options;
  options.memory_budget_bytes = 96 << 10;
  return gpu::create_host_device(options);
}

TEST(StreamOrderedMemory, ABufferOfTheSameSizeIsReusedOnItsStreamWithoutWaiting) {
  auto device = gpu::create_host_device({});
  gpu::Stream& stream = device->compute_stream();
  StreamOrderedMemory memory(*device);
  gpu::DeviceBuffer first = memory.allocate(stream, 1 << 16, "first");
  void* const address = first.data();
  HeldStream gate(stream);
  stream.fill_zero(first.data(), first.bytes());  // its use, still queued behind the gate
  memory.release(stream, std::move(first));
  // The stream has not run the release: the host must not wait for it (it would never return).
  auto reused = std::async(std::launch::async, [&] {
    std::shared_ptr<gpu::Event> released;
    gpu::DeviceBuffer buffer = memory.allocate(stream, 1 << 16, "second", &released);
    EXPECT_NE(released, nullptr);
    EXPECT_FALSE(released->query());  // the earlier use has not run yet
    return buffer;
  });
  ASSERT_EQ(reused.wait_for(10s), std::future_status::ready);
  gpu::DeviceBuffer second = reused.get();
  EXPECT_EQ(second.data(), address);
  EXPECT_EQ(memory.waits(), 0);
  EXPECT_EQ(device->bytes_in_use(), 1 << 16);
  gate.open();
  stream.synchronize();
}

// A size that matches no released buffer takes fresh memory, still without waiting; the
// released one is not counted as in use (in stream order it is free), though the host holds it.
TEST(StreamOrderedMemory, AnotherSizeTakesFreshMemoryAndCountsInStreamOrder) {
  auto device = gpu::create_host_device({});
  gpu::Stream& stream = device->compute_stream();
  StreamOrderedMemory memory(*device);
  memory.reset_peak();
  HeldStream gate(stream);
  memory.release(stream, memory.allocate(stream, 1 << 16, "first"));
  auto other =
      std::async(std::launch::async, [&] { return memory.allocate(stream, 1 << 12, "x"); });
  ASSERT_EQ(other.wait_for(10s), std::future_status::ready);
  gpu::DeviceBuffer buffer = other.get();
  EXPECT_EQ(memory.waits(), 0);
  EXPECT_EQ(device->bytes_in_use(), (1 << 16) + (1 << 12));
  EXPECT_EQ(memory.live_bytes(), 1 << 12);
  EXPECT_EQ(memory.peak_bytes(), 1 << 16);
  gate.open();
  stream.synchronize();
}

// When the budget has no room beside the released buffers still held, the allocation waits for
// their releases to run and frees them first.
TEST(StreamOrderedMemory, OverTheBudgetItWaitsForTheReleases) {
  auto device = device_of_96_kib();
  gpu::Stream& stream = device->compute_stream();
  StreamOrderedMemory memory(*device);
  auto gate = std::make_unique<HeldStream>(stream);
  memory.release(stream, memory.allocate(stream, 64 << 10, "first"));
  auto other =
      std::async(std::launch::async, [&] { return memory.allocate(stream, 48 << 10, "x"); });
  // 64 + 48 KiB is over the budget: it waits for the stream, not ready while the gate holds it...
  EXPECT_EQ(other.wait_for(100ms), std::future_status::timeout);
  gate->open();
  // ...and the released memory is freed before the new one is taken.
  ASSERT_EQ(other.wait_for(10s), std::future_status::ready);
  gpu::DeviceBuffer buffer = other.get();
  EXPECT_EQ(memory.waits(), 1);
  EXPECT_EQ(device->bytes_in_use(), 48 << 10);
}

// A buffer released on another stream is not reused here before that stream has run the
// release; then it is.
TEST(StreamOrderedMemory, AReleaseOnAnotherStreamIsReusedHereOnceItHasRun) {
  auto device = gpu::create_host_device({});
  gpu::Stream& compute = device->compute_stream();
  gpu::Stream& copies = device->h2d_stream();
  StreamOrderedMemory memory(*device);
  {
    HeldStream gate(copies);
    memory.release(copies, memory.allocate(copies, 1 << 16, "copy target"));
    gpu::DeviceBuffer fresh = memory.allocate(compute, 1 << 16, "compute");
    EXPECT_EQ(device->bytes_in_use(), 2 << 16);  // the other is not free here yet
    memory.release(compute, std::move(fresh));
  }
  copies.synchronize();
  compute.synchronize();
  std::shared_ptr<gpu::Event> released;
  gpu::DeviceBuffer reused = memory.allocate(compute, 1 << 16, "compute", &released);
  EXPECT_EQ(released, nullptr);  // passed: nothing to wait for
  EXPECT_EQ(device->bytes_in_use(), 2 << 16);
}

// Released buffers stay for later allocations of their size, and are freed, without waiting once
// their releases have run, when the budget needs the room.
TEST(StreamOrderedMemory, ReleasedBuffersAreKeptUntilTheBudgetNeedsThem) {
  auto device = device_of_96_kib();
  gpu::Stream& stream = device->compute_stream();
  StreamOrderedMemory memory(*device);
  memory.release(stream, memory.allocate(stream, 64 << 10, "a"));
  stream.synchronize();
  gpu::DeviceBuffer c = memory.allocate(stream, 16 << 10, "c");
  EXPECT_EQ(device->bytes_in_use(), 80 << 10);  // a is kept
  gpu::DeviceBuffer d = memory.allocate(stream, 48 << 10, "d");
  EXPECT_EQ(device->bytes_in_use(), 64 << 10);  // a made room for d
  EXPECT_EQ(memory.waits(), 0);
}

// A client's cache in this memory gives buffers back through the reclaimer when the budget has
// no room and nothing released is left; with nothing to give, the budget's error stands.
TEST(StreamOrderedMemory, TheReclaimerEmptiesAClientsCacheBeforeTheBudgetRefuses) {
  auto device = device_of_96_kib();
  gpu::Stream& stream = device->compute_stream();
  StreamOrderedMemory memory(*device);
  std::vector<gpu::DeviceBuffer> cache;
  for (int i = 0; i < 2; ++i)
    cache.push_back(memory.allocate(stream, 40 << 10, "cached"));
  int reclaimed = 0;
  memory.set_reclaimer([&] {
    if (cache.empty()) return false;
    memory.release(stream, std::move(cache.back()));
    cache.pop_back();
    ++reclaimed;
    return true;
  });
  gpu::DeviceBuffer needed = memory.allocate(stream, 48 << 10, "needed now");
  EXPECT_EQ(reclaimed, 1);  // one cached buffer made room
  EXPECT_EQ(device->bytes_in_use(), (40 << 10) + (48 << 10));
  EXPECT_THROW(static_cast<void>(memory.allocate(stream, 90 << 10, "too big")), UserError);
  EXPECT_EQ(reclaimed, 2);  // the cache went too, and still it did not fit
  memory.set_reclaimer({});
  memory.release(stream, std::move(needed));
  memory.drain();
}

// A prefetch's allocation (try_allocate) takes only the room there is now: over the budget it
// gets nothing, without emptying a client's cache or waiting for a release; in the arena it takes
// a range no release still guards, where allocate() would take the one its own stream released.
TEST(StreamOrderedMemory, APrefetchTakesOnlyTheRoomThereIsNow) {
  {
    auto device = device_of_96_kib();
    gpu::Stream& stream = device->compute_stream();
    StreamOrderedMemory memory(*device);
    int reclaimed = 0;
    memory.set_reclaimer([&] { return ++reclaimed < 0; });
    gpu::DeviceBuffer held = memory.allocate(stream, 64 << 10, "held");
    EXPECT_FALSE(memory.try_allocate(stream, 64 << 10, "ahead"));
    auto gate = std::make_unique<HeldStream>(device->d2h_stream());
    memory.release(device->d2h_stream(), std::move(held));
    EXPECT_FALSE(memory.try_allocate(stream, 64 << 10, "ahead"));  // its release has not run
    EXPECT_EQ(reclaimed, 0);
    EXPECT_EQ(memory.waits(), 0);
    gate->open();
    device->d2h_stream().synchronize();
    gpu::DeviceBuffer ahead = memory.try_allocate(stream, 64 << 10, "ahead");
    EXPECT_TRUE(ahead);
    memory.set_reclaimer({});
    memory.release(stream, std::move(ahead));
    memory.drain();
  }
  ThreeRanges arena;
  gpu::Stream& compute = arena.device->compute_stream();
  auto gate = std::make_unique<HeldStream>(compute);
  arena.memory.release(compute, std::move(arena.first));  // queued behind the gate
  std::shared_ptr<gpu::Event> released;
  gpu::DeviceBuffer ahead = arena.memory.try_allocate(compute, 1 << 16, "ahead", &released);
  EXPECT_NE(ahead.data(), arena.first_address);
  EXPECT_EQ(released, nullptr);
  gpu::DeviceBuffer now = arena.memory.allocate(compute, 1 << 16, "now", &released);
  EXPECT_EQ(now.data(), arena.first_address);  // its own stream's release: no wait on the device
  gate->open();
  compute.synchronize();
  for (gpu::DeviceBuffer* buffer : {&ahead, &now, &arena.other})
    arena.memory.release(compute, std::move(*buffer));
  arena.memory.drain();
}

// The arena: after reserve, allocations are carved from it. Released ranges merge, so a size the
// step never had before fits where two smaller buffers were, with their releases still queued
// behind the gate: no fresh device memory and no wait, where the budget alone would have made the
// host wait (OverTheBudgetItWaitsForTheReleases).
TEST(StreamOrderedMemory, TheArenaServesAnySizeFromReleasedRangesWithoutWaiting) {
  auto device = device_of_96_kib();
  gpu::Stream& stream = device->compute_stream();
  StreamOrderedMemory memory(*device);
  memory.reserve(64 << 10);
  EXPECT_EQ(memory.reserved_bytes(), 64 << 10);
  const std::int64_t fresh_after_reserve = memory.fresh_allocations();
  HeldStream gate(stream);
  gpu::DeviceBuffer a = memory.allocate(stream, 32 << 10, "a");
  gpu::DeviceBuffer b = memory.allocate(stream, 32 << 10, "b");
  void* const start = a.data();
  stream.fill_zero(a.data(), a.bytes());  // their uses, queued behind the gate
  stream.fill_zero(b.data(), b.bytes());
  memory.release(stream, std::move(b));
  memory.release(stream, std::move(a));
  EXPECT_EQ(memory.live_bytes(), 0);
  auto whole = std::async(std::launch::async, [&] {
    std::shared_ptr<gpu::Event> released;
    gpu::DeviceBuffer buffer = memory.allocate(stream, 64 << 10, "whole", &released);
    EXPECT_NE(released, nullptr);  // the latest of the two releases on this stream
    EXPECT_FALSE(released->query());
    return buffer;
  });
  ASSERT_EQ(whole.wait_for(10s), std::future_status::ready);
  gpu::DeviceBuffer buffer = whole.get();
  EXPECT_EQ(buffer.data(), start);
  EXPECT_EQ(memory.fresh_allocations(), fresh_after_reserve);
  EXPECT_EQ(memory.waits(), 0);
  EXPECT_EQ(device->bytes_in_use(), 64 << 10);  // the arena, nothing beside it
  EXPECT_EQ(memory.live_bytes(), 64 << 10);
  gate.open();
  memory.release(stream, std::move(buffer));
  memory.drain();
}

// A range released on another stream is handed out at once; the allocating stream waits for the
// release on the device, so its next work runs only after the work queued before the release.
TEST(StreamOrderedMemory, AnArenaRangeReleasedOnAnotherStreamIsOrderedOnTheDevice) {
  auto device = gpu::create_host_device({});
  gpu::Stream& compute = device->compute_stream();
  gpu::Stream& copies = device->h2d_stream();
  StreamOrderedMemory memory(*device);
  memory.reserve(1 << 16);
  auto gate = std::make_unique<HeldStream>(copies);
  gpu::DeviceBuffer target = memory.allocate(copies, 1 << 16, "copy target");
  void* const address = target.data();
  bool copy_ran = false;
  copies.launch([&] { copy_ran = true; });
  memory.release(copies, std::move(target));
  std::shared_ptr<gpu::Event> released;
  gpu::DeviceBuffer reused = memory.allocate(compute, 1 << 16, "compute", &released);
  EXPECT_EQ(reused.data(), address);
  ASSERT_NE(released, nullptr);
  bool saw_copy = false;
  compute.launch([&] { saw_copy = copy_ran; });
  auto after = device->create_event();
  compute.record(*after);
  EXPECT_FALSE(after->query());  // the compute stream waits behind the held copy stream
  EXPECT_FALSE(released->query());
  gate->open();
  compute.synchronize();
  EXPECT_TRUE(saw_copy);
  EXPECT_TRUE(released->query());
  EXPECT_EQ(memory.waits(), 0);
  memory.release(compute, std::move(reused));
  memory.drain();
}

// A module's gradients going down on the copy stream while the next module's backward runs: the
// compute stream's next buffer of that size is taken from a range it need not wait for, while one
// fits, rather than from the range the copy still reads. Once the copy has passed it, that range
// joins its free neighbours again, and when nothing else fits the allocation takes it and is
// ordered after the copy, as before.
TEST(StreamOrderedMemory, TheComputeStreamTakesARangeItNeedNotWaitForWhileOneFits) {
  ThreeRanges arena;
  StreamOrderedMemory& memory = arena.memory;
  gpu::Stream& compute = arena.device->compute_stream();
  gpu::Stream& copies = arena.device->d2h_stream();
  auto gate = std::make_unique<HeldStream>(copies);
  memory.release(copies, std::move(arena.first));  // copied down first: the copy stream is held
  std::shared_ptr<gpu::Event> released;
  gpu::DeviceBuffer second = memory.allocate(compute, 1 << 16, "gradients of module 1", &released);
  EXPECT_NE(second.data(), arena.first_address);
  EXPECT_EQ(released, nullptr);  // nothing to wait for
  // The arena is full but for the range the copy still reads: taken, ordered after the copy.
  gpu::DeviceBuffer third = memory.allocate(compute, 1 << 16, "gradients of module 0", &released);
  EXPECT_EQ(third.data(), arena.first_address);
  ASSERT_NE(released, nullptr);
  EXPECT_FALSE(released->query());
  gate->open();
  compute.synchronize();
  EXPECT_TRUE(released->query());
  EXPECT_EQ(memory.waits(), 0);
  EXPECT_EQ(memory.fresh_allocations(), 1);  // the arena
  // Released on both streams, then passed: the ranges are one again, and a buffer of the whole
  // arena is carved from it.
  memory.release(copies, std::move(third));
  memory.release(compute, std::move(second));
  memory.release(compute, std::move(arena.other));
  copies.synchronize();
  compute.synchronize();
  gpu::DeviceBuffer whole = memory.allocate(compute, 3 << 16, "everything");
  EXPECT_EQ(memory.fresh_allocations(), 1);
  memory.release(compute, std::move(whole));
  memory.drain();
}

// What the arena cannot place (here a hole too small, the rest of the arena taken) takes fresh
// device memory beside it, counted; a buffer dropped without release() goes back to the arena at
// once and is carved again.
TEST(StreamOrderedMemory, WhatTheArenaCannotPlaceTakesFreshMemory) {
  auto device = gpu::create_host_device({});
  gpu::Stream& stream = device->compute_stream();
  StreamOrderedMemory memory(*device);
  memory.reserve(64 << 10);
  const std::int64_t fresh_after_reserve = memory.fresh_allocations();
  gpu::DeviceBuffer a = memory.allocate(stream, 32 << 10, "a");
  gpu::DeviceBuffer b = memory.allocate(stream, 32 << 10, "b");
  void* const a_address = a.data();
  a.reset();  // dropped, not released: free now
  gpu::DeviceBuffer c = memory.allocate(stream, 48 << 10, "c");
  EXPECT_EQ(memory.fresh_allocations(), fresh_after_reserve + 1);
  EXPECT_EQ(device->bytes_in_use(), (64 << 10) + (48 << 10));
  EXPECT_EQ(memory.live_bytes(), (32 << 10) + (48 << 10));
  gpu::DeviceBuffer d = memory.allocate(stream, 100, "d");  // rounded up to 256 bytes in the hole
  EXPECT_EQ(d.data(), a_address);
  EXPECT_EQ(memory.live_bytes(), (32 << 10) + (48 << 10) + 100);
  EXPECT_EQ(memory.fresh_allocations(), fresh_after_reserve + 1);
  EXPECT_TRUE(memory.allocate(stream, 0, "nothing").empty());  // as Device::allocate
  memory.release(stream, std::move(c));
  memory.release(stream, std::move(b));
  memory.release(stream, std::move(d));
  memory.drain();
}

// What was live when the peak was first reached, named as allocate() was told, on a device that
// only counts.
TEST(StreamOrderedMemory, KeepsTheBuffersLiveAtItsPeak) {
  std::unique_ptr<gpu::Device> device = gpu::create_counting_device();
  gpu::Stream& stream = device->compute_stream();
  StreamOrderedMemory memory(*device);
  gpu::DeviceBuffer before = memory.allocate(stream, 1000, "before the step");
  memory.keep_peak_set();
  memory.reset_peak();
  gpu::DeviceBuffer a = memory.allocate(stream, 100, "a");
  gpu::DeviceBuffer b = memory.allocate(stream, 200, "b");
  memory.release(stream, std::move(a));
  gpu::DeviceBuffer c = memory.allocate(stream, 100, "c");  // back to the peak, not past it
  auto names = [&] {
    std::vector<std::string> out;
    for (const StreamOrderedMemory::LiveBuffer& buffer : memory.peak_set())
      out.push_back(buffer.what + ":" + std::to_string(buffer.bytes));
    return out;
  };
  EXPECT_EQ(memory.peak_bytes(), 1300);
  EXPECT_EQ(names(), (std::vector<std::string>{"a:100", "b:200"}));
  gpu::DeviceBuffer d = memory.allocate(stream, 50, "d");
  EXPECT_EQ(memory.peak_bytes(), 1350);
  EXPECT_EQ(names(), (std::vector<std::string>{"b:200", "c:100", "d:50"}));
  for (gpu::DeviceBuffer* buffer : {&before, &b, &c, &d})
    memory.release(stream, std::move(*buffer));
}

}  // namespace
}  // namespace strata::engine::memory

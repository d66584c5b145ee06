#include "engine/memory/pinned_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "base/error.h"
#include "gpu/open_device.h"

namespace strata::engine::memory {
namespace {

std::unique_ptr<gpu::Device> host_device() {
  gpu::DeviceOptions options;
  options.memory_budget_bytes = 64 << 20;
  return gpu::create_host_device(options);
}

TEST(PinnedPool, BuffersAreAlignedDistinctAndPinned) {
  auto device = host_device();
  PinnedPool pool(*device, 3, 5000);
  EXPECT_EQ(pool.buffer_size_bytes(), 8192);
  EXPECT_TRUE(pool.pinned());
  EXPECT_GE(device->pinned_bytes_in_use(), 3 * 8192);
  PinnedPool::Lease a = pool.acquire();
  PinnedPool::Lease b = pool.acquire();
  PinnedPool::Lease c = pool.acquire();
  for (const auto* lease : {&a, &b, &c}) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(lease->bytes().data()) % 4096, 0u);
    EXPECT_EQ(lease->bytes().size(), 8192u);
  }
  EXPECT_NE(a.index(), b.index());
  EXPECT_NE(b.index(), c.index());
  EXPECT_NE(a.index(), c.index());
  EXPECT_EQ(pool.in_use(), 3);
  EXPECT_FALSE(pool.try_acquire());
  b.release();
  EXPECT_EQ(pool.in_use(), 2);
  PinnedPool::Lease d = pool.try_acquire();
  ASSERT_TRUE(d);
  PinnedPool::Lease moved = std::move(d);
  EXPECT_FALSE(d);  // NOLINT(bugprone-use-after-move): a moved-from lease is empty
  EXPECT_TRUE(moved);
  EXPECT_EQ(pool.peak_in_use(), 3);
}

TEST(PinnedPool, UnpinnedPoolNeedsNoLockedMemory) {
  auto device = host_device();
  PinnedPool pool(*device, 2, 1 << 20, {.pin_memory = false, .what = "test"});
  EXPECT_FALSE(pool.pinned());
  EXPECT_EQ(device->pinned_bytes_in_use(), 0);
  EXPECT_TRUE(pool.pinned_arena().empty());
  EXPECT_EQ(pool.unpinned_bytes(), 2 << 20);
}

TEST(PinnedPool, AcquireWaitsUntilABufferIsGivenBack) {
  auto device = host_device();
  PinnedPool pool(*device, 1, 4096);
  PinnedPool::Lease held = pool.acquire();
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    PinnedPool::Lease lease = pool.acquire();
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());
  held.release();
  waiter.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(pool.in_use(), 0);
}

// Many threads borrow and write their buffers: never more than buffer_count lent, never one
// buffer lent twice.
TEST(PinnedPool, StressNeverLendsMoreThanItHas) {
  auto device = host_device();
  constexpr int kBuffers = 4;
  PinnedPool pool(*device, kBuffers, 4096);
  std::atomic<int> lent{0};
  std::atomic<int> max_lent{0};
  std::vector<std::atomic<int>> owners(kBuffers);
  std::atomic<bool> clash{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        PinnedPool::Lease lease = pool.acquire();
        int now = ++lent;
        int seen = max_lent.load();
        while (now > seen && !max_lent.compare_exchange_weak(seen, now)) {
        }
        if (owners[static_cast<std::size_t>(lease.index())].exchange(t + 1) != 0) clash = true;
        lease.bytes()[0] = std::byte{static_cast<unsigned char>(t)};
        if (lease.bytes()[0] != std::byte{static_cast<unsigned char>(t)}) clash = true;
        owners[static_cast<std::size_t>(lease.index())] = 0;
        --lent;
      }
    });
  for (auto& thread : threads)
    thread.join();
  EXPECT_FALSE(clash.load());
  EXPECT_LE(max_lent.load(), kBuffers);
  EXPECT_LE(pool.peak_in_use(), kBuffers);
  EXPECT_EQ(pool.in_use(), 0);
}

TEST(PinnedPool, RefusesNonPositiveSizes) {
  auto device = host_device();
  try {
    PinnedPool pool(*device, 0, 4096);
    FAIL() << "expected UserError";
  } catch (const UserError& error) {
    EXPECT_EQ(error.exit_status(), 2);
    EXPECT_NE(std::string(error.what()).find("buffers"), std::string::npos);
  }
}

TEST(PinnedPool, LockedMemoryLimitTooLowSaysHowMuchAndHowToRaise) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &limit), 0);
  if (limit.rlim_cur == RLIM_INFINITY) GTEST_SKIP() << "RLIMIT_MEMLOCK is unlimited here";
  auto device = host_device();
  const std::int64_t size = static_cast<std::int64_t>(limit.rlim_cur) + (1 << 20);
  try {
    PinnedPool pool(*device, 1, size);
    FAIL() << "expected UserError";
  } catch (const UserError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("RLIMIT_MEMLOCK"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string((size + 4095) / 4096 * 4096)), std::string::npos) << what;
    EXPECT_NE(error.fix().find("ulimit -l"), std::string::npos);
    EXPECT_NE(error.fix().find("pin_memory"), std::string::npos);
  }
}

// The engine's one pool: the parameter tier, the optimizer and the gradient reducer each reserve
// a shelf, and each shelf lends only its own buffers.
TEST(PinnedPool, ShelvesLendTheirOwnBuffersFromOneArenaEach) {
  auto device = host_device();
  PinnedPool pool(*device);
  const PinnedPool::Shelf params = pool.reserve(2, 5000, {.pin_memory = true, .what = "params"});
  const PinnedPool::Shelf states =
      pool.reserve(1, 3 << 20, {.pin_memory = false, .what = "states"});
  const PinnedPool::Shelf grads = pool.reserve(1, 4096, {.pin_memory = true, .what = "grads"});
  EXPECT_FALSE(pool.is_open());
  EXPECT_EQ(pool.in_use(params), 0);
  pool.open();
  ASSERT_TRUE(pool.is_open());
  EXPECT_EQ(pool.shelf_count(), 3);
  EXPECT_EQ(pool.buffer_size_bytes(params), 8192);
  EXPECT_EQ(pool.buffer_size_bytes(states), 3 << 20);
  EXPECT_TRUE(pool.pinned(params));
  EXPECT_FALSE(pool.pinned(states));
  // The page-locked shelves make the registered arena; the other is counted as host memory.
  EXPECT_EQ(static_cast<std::int64_t>(pool.pinned_arena().size()), 2 * 8192 + 4096);
  EXPECT_EQ(pool.unpinned_bytes(), 3 << 20);

  PinnedPool::Lease a = pool.acquire(params);
  PinnedPool::Lease b = pool.acquire(params);
  // The params shelf is empty; the others still lend.
  EXPECT_FALSE(pool.try_acquire(params));
  PinnedPool::Lease c = pool.try_acquire(states);
  PinnedPool::Lease d = pool.try_acquire(grads);
  ASSERT_TRUE(c);
  ASSERT_TRUE(d);
  EXPECT_EQ(c.bytes().size(), std::size_t{3} << 20);
  EXPECT_EQ(d.bytes().size(), 4096u);
  const std::span<std::byte> arena = pool.pinned_arena();
  auto in_arena = [&](const PinnedPool::Lease& lease) {
    return lease.bytes().data() >= arena.data() &&
           lease.bytes().data() + lease.bytes().size() <= arena.data() + arena.size();
  };
  EXPECT_TRUE(in_arena(a));
  EXPECT_TRUE(in_arena(b));
  EXPECT_TRUE(in_arena(d));
  EXPECT_FALSE(in_arena(c));
  // No two buffers overlap.
  std::vector<std::span<std::byte>> spans = {a.bytes(), b.bytes(), c.bytes(), d.bytes()};
  for (std::size_t i = 0; i < spans.size(); ++i)
    for (std::size_t j = i + 1; j < spans.size(); ++j)
      EXPECT_TRUE(spans[i].data() + spans[i].size() <= spans[j].data() ||
                  spans[j].data() + spans[j].size() <= spans[i].data())
          << i << " and " << j;
  EXPECT_EQ(pool.in_use(params), 2);
  EXPECT_EQ(pool.in_use(states), 1);
  a.release();
  EXPECT_EQ(pool.in_use(params), 1);
  EXPECT_EQ(pool.peak_in_use(params), 2);
  EXPECT_EQ(pool.peak_in_use(grads), 1);
}

// A waiter on one shelf is woken by its own shelf's buffer, not by another's.
TEST(PinnedPool, AcquireOnAShelfWaitsForThatShelf) {
  auto device = host_device();
  PinnedPool pool(*device);
  const PinnedPool::Shelf one = pool.reserve(1, 4096, {.pin_memory = false, .what = "one"});
  const PinnedPool::Shelf two = pool.reserve(1, 4096, {.pin_memory = false, .what = "two"});
  pool.open();
  PinnedPool::Lease held = pool.acquire(one);
  std::atomic<bool> got = false;
  std::thread waiter([&] {
    PinnedPool::Lease lease = pool.acquire(one);
    got = true;
  });
  { PinnedPool::Lease other = pool.acquire(two); }  // given back: the waiter on `one` stays asleep
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());
  held.release();
  waiter.join();
  EXPECT_TRUE(got.load());
}

// Two page-locked shelves that fit the limit apart but not together: the refusal names both.
TEST(PinnedPool, LockedMemoryLimitCountsEveryPinnedShelf) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &limit), 0);
  if (limit.rlim_cur == RLIM_INFINITY) GTEST_SKIP() << "RLIMIT_MEMLOCK is unlimited here";
  auto device = host_device();
  const std::int64_t half = static_cast<std::int64_t>(limit.rlim_cur) / 2 / 4096 * 4096 + 4096;
  PinnedPool pool(*device);
  pool.reserve(1, half, {.pin_memory = true, .what = "parameter swap buffers"});
  pool.reserve(1, half, {.pin_memory = true, .what = "optimizer swap buffers"});
  pool.reserve(4, 1 << 20, {.pin_memory = false, .what = "unpinned"});
  try {
    pool.open();
    FAIL() << "expected UserError";
  } catch (const UserError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("parameter swap buffers"), std::string::npos) << what;
    EXPECT_NE(what.find("optimizer swap buffers"), std::string::npos) << what;
    EXPECT_EQ(what.find("unpinned"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(2 * half)), std::string::npos) << what;
    EXPECT_NE(error.fix().find("pin_memory"), std::string::npos);
  }
  EXPECT_FALSE(pool.is_open());
}

}  // namespace
}  // namespace strata::engine::memory

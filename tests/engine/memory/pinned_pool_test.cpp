#include "engine/memory/pinned_pool.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "gpu/open_device.h"
#include "gpu/pinned_limit.h"
#include "tests/gpu/memlock_limit.h"

namespace strata::engine::memory {
namespace {

std::unique_ptr<gpu::Device> host_device() {
  gpu::DeviceOptions options;
  options.memory_budget_bytes = 64 << 20;
  return gpu::create_host_device(options);
}

// What the kernel says of a thread of this process (/proc/self/task/TID/status): whether it is
// asleep, and how many times it has blocked (voluntary_ctxt_switches).
struct ThreadState {
  bool asleep = false;
  std::int64_t blocked_times = 0;
};

ThreadState thread_state(pid_t tid) {
  std::ifstream status("/proc/self/task/" + std::to_string(tid) + "/status");
  ThreadState state;
  std::string line;
  while (std::getline(status, line)) {
    // "State:\tS (sleeping)"
    if (line.starts_with("State:")) {
      const std::size_t letter = line.find_first_not_of(" \t", 6);
      state.asleep = letter != std::string::npos && line[letter] == 'S';
    }
    if (line.starts_with("voluntary_ctxt_switches:"))
      state.blocked_times = std::stoll(line.substr(line.find(':') + 1));
  }
  return state;
}

// A thread that calls `acquire` (which sets `got` once it returns), and the means to tell, without
// a sleep, that it is blocked in it: the kernel reports it asleep, having blocked more than
// `blocked_before` times. Broken code that returns sets `got` instead, which ends the wait too.
class Waiter {
 public:
  explicit Waiter(std::function<void()> acquire)
      : thread_([this, acquire = std::move(acquire)] {
          tid_.set_value(::gettid());
          acquire();
          got_ = true;
        }),
        tid_value_(tid_.get_future().get()) {}
  ~Waiter() {
    if (thread_.joinable()) thread_.join();
  }

  // Returns once the thread has returned from acquire or sleeps in it after more than
  // `blocked_before` blocks; then tells whether it got a buffer.
  bool got_after_it_blocked(std::int64_t blocked_before = -1) const {
    for (;;) {
      if (got_) return true;
      const ThreadState state = thread_state(tid_value_);
      if (state.asleep && state.blocked_times > blocked_before) return got_;
      std::this_thread::yield();
    }
  }
  std::int64_t blocked_times() const { return thread_state(tid_value_).blocked_times; }
  bool got() const { return got_; }
  void join() { thread_.join(); }

 private:
  std::promise<pid_t> tid_;
  std::atomic<bool> got_{false};
  std::thread thread_;
  pid_t tid_value_;
};

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
  Waiter waiter([&] { PinnedPool::Lease lease = pool.acquire(); });
  EXPECT_FALSE(waiter.got_after_it_blocked()) << "acquire returned while every buffer was lent";
  held.release();
  waiter.join();
  EXPECT_TRUE(waiter.got());
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

// In a process that may lock 1 MiB (CAP_IPC_LOCK dropped, RLIMIT_MEMLOCK lowered), a 2 MiB pinned
// shelf is refused before anything is locked. Returns 0 when the refusal says how much, the limit,
// and how to raise it or to pin nothing.
int refusal_past_the_limit() {
  if (gpu::testing::limit_locked_memory(1 << 20) != 0) return 10;
  auto device = host_device();
  try {
    PinnedPool pool(*device, 1, 2 << 20);
    return 11;
  } catch (const UserError& error) {
    const std::string what = error.what();
    if (what.find("2097152 bytes") == std::string::npos) return 12;
    if (what.find("may lock 1.00 MiB (RLIMIT_MEMLOCK") == std::string::npos) return 13;
    if (error.fix().find("ulimit -l") == std::string::npos) return 14;
    if (error.fix().find("CAP_IPC_LOCK") == std::string::npos) return 15;
    if (error.fix().find("pin_memory") == std::string::npos) return 16;
  }
  return device->pinned_bytes_in_use() == 0 ? 0 : 17;
}

TEST(PinnedPoolDeathTest, LockedMemoryLimitTooLowSaysHowMuchAndHowToRaise) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(refusal_past_the_limit()), ::testing::ExitedWithCode(0), "");
}

// With CAP_IPC_LOCK the kernel locks past RLIMIT_MEMLOCK, and so does the pool.
TEST(PinnedPool, CapIpcLockLetsThePoolPinPastTheRlimit) {
  const gpu::PinnedLimit limit = gpu::pinned_limit();
  if (!limit.cap_ipc_lock || !limit.rlimit_bytes || *limit.rlimit_bytes > (256 << 20))
    GTEST_SKIP() << "needs CAP_IPC_LOCK and an RLIMIT_MEMLOCK below 256 MiB; here "
                 << limit.describe();
  auto device = host_device();
  const std::int64_t size = *limit.rlimit_bytes + (1 << 20);
  PinnedPool pool(*device, 1, size);
  EXPECT_TRUE(pool.pinned());
  EXPECT_GE(device->pinned_bytes_in_use(), size);
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
  Waiter waiter([&] { PinnedPool::Lease lease = pool.acquire(one); });
  ASSERT_FALSE(waiter.got_after_it_blocked()) << "acquire returned while `one` was all lent";
  const std::int64_t blocked = waiter.blocked_times();
  // Given back, `two`'s buffer wakes every waiter (one condition variable): the waiter on `one`
  // wakes, finds its shelf still lent, and blocks again.
  { PinnedPool::Lease other = pool.acquire(two); }
  EXPECT_FALSE(waiter.got_after_it_blocked(blocked)) << "woken by another shelf's buffer";
  held.release();
  waiter.join();
  EXPECT_TRUE(waiter.got());
}

// Two page-locked shelves that fit a 1 MiB limit apart but not together: the refusal names both.
// Returns 0 when it does, in a process limited as refusal_past_the_limit's.
int refusal_counts_every_pinned_shelf() {
  if (gpu::testing::limit_locked_memory(1 << 20) != 0) return 10;
  auto device = host_device();
  const std::int64_t half = (512 << 10) + 4096;
  PinnedPool pool(*device);
  pool.reserve(1, half, {.pin_memory = true, .what = "parameter swap buffers"});
  pool.reserve(1, half, {.pin_memory = true, .what = "optimizer swap buffers"});
  pool.reserve(4, 1 << 20, {.pin_memory = false, .what = "unpinned"});
  try {
    pool.open();
    return 11;
  } catch (const UserError& error) {
    const std::string what = error.what();
    if (what.find("parameter swap buffers") == std::string::npos) return 12;
    if (what.find("optimizer swap buffers") == std::string::npos) return 13;
    if (what.find("unpinned") != std::string::npos) return 14;
    if (what.find(std::to_string(2 * half)) == std::string::npos) return 15;
    if (error.fix().find("pin_memory") == std::string::npos) return 16;
  }
  return pool.is_open() ? 17 : 0;
}

TEST(PinnedPoolDeathTest, LockedMemoryLimitCountsEveryPinnedShelf) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(refusal_counts_every_pinned_shelf()), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace strata::engine::memory

// gpu::pinned_limit: how much a process may lock, from RLIMIT_MEMLOCK and CAP_IPC_LOCK as the
// kernel's mlock decides it, and this process's answer held against /proc/self/status and against
// a real mlock, here and in a child that dropped the capability.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "gpu/pinned_limit.h"
#include "tests/gpu/memlock_limit.h"

namespace strata::gpu {
namespace {

using ::testing::HasSubstr;

constexpr std::int64_t kMiB = 1 << 20;

// Whether the kernel locks `bytes` more for this process now.
bool mlock_succeeds(std::int64_t bytes) {
  void* data = std::aligned_alloc(4096, static_cast<std::size_t>(bytes));
  if (data == nullptr) return false;
  const bool locked = ::mlock(data, static_cast<std::size_t>(bytes)) == 0;
  if (locked) ::munlock(data, static_cast<std::size_t>(bytes));
  std::free(data);
  return locked;
}

// CAP_IPC_LOCK (bit 14) of the CapEff line of /proc/self/status.
bool cap_ipc_lock_in_proc_status() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0)
      return ((std::stoull(line.substr(7), nullptr, 16) >> 14) & 1) != 0;
  }
  ADD_FAILURE() << "no CapEff line in /proc/self/status";
  return false;
}

TEST(PinnedLimit, CapIpcLockLiftsTheRlimit) {
  const PinnedLimit limited{8 * kMiB, false};
  EXPECT_EQ(limited.lockable_bytes(), std::optional<std::int64_t>(8 * kMiB));
  EXPECT_TRUE(limited.allows(4 * kMiB, 4 * kMiB));
  EXPECT_FALSE(limited.allows(4 * kMiB, 4 * kMiB + 1));
  EXPECT_EQ(limited.describe(),
            "8.00 MiB (RLIMIT_MEMLOCK, 8192 KiB as `ulimit -l` shows it; no CAP_IPC_LOCK)");

  const PinnedLimit lifted{8 * kMiB, true};
  EXPECT_EQ(lifted.lockable_bytes(), std::nullopt);
  EXPECT_TRUE(lifted.allows(8 * kMiB, 1024 * kMiB));
  EXPECT_EQ(lifted.describe(), "unlimited (RLIMIT_MEMLOCK 8.00 MiB, lifted by CAP_IPC_LOCK)");

  for (bool cap : {false, true}) {
    const PinnedLimit unlimited{std::nullopt, cap};
    EXPECT_EQ(unlimited.lockable_bytes(), std::nullopt);
    EXPECT_TRUE(unlimited.allows(0, std::int64_t{1} << 40));
    EXPECT_EQ(unlimited.describe(), "unlimited");
  }
  // RLIMIT_MEMLOCK 0 without the capability: nothing may be locked (mlock says EPERM).
  EXPECT_FALSE((PinnedLimit{0, false}.allows(0, 1)));
}

TEST(PinnedLimit, ThisProcessReadsItsRlimitAndItsEffectiveCapabilities) {
  const PinnedLimit limit = pinned_limit();
  rlimit memlock{};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &memlock), 0);
  if (memlock.rlim_cur == RLIM_INFINITY)
    EXPECT_EQ(limit.rlimit_bytes, std::nullopt);
  else
    EXPECT_EQ(limit.rlimit_bytes, std::optional<std::int64_t>(memlock.rlim_cur));
  EXPECT_EQ(limit.cap_ipc_lock, cap_ipc_lock_in_proc_status());
}

// 1 MiB past RLIMIT_MEMLOCK: the limit allows it exactly when the kernel locks it.
TEST(PinnedLimit, AgreesWithMlockPastTheRlimit) {
  if (testing::address_sanitizer)
    GTEST_SKIP() << "AddressSanitizer makes mlock a no-op that succeeds";
  const PinnedLimit limit = pinned_limit();
  if (!limit.rlimit_bytes || *limit.rlimit_bytes > 256 * kMiB)
    GTEST_SKIP() << "RLIMIT_MEMLOCK is " << limit.describe() << ": too large to lock past";
  const std::int64_t bytes = *limit.rlimit_bytes + kMiB;
  EXPECT_EQ(limit.allows(0, bytes), mlock_succeeds(bytes)) << limit.describe();
}

// In a process without CAP_IPC_LOCK (root's dropped), the limit is RLIMIT_MEMLOCK, and mlock
// holds to it. Returns 0 when both agree.
int limited_process_agrees_with_mlock() {
  const std::int64_t small = kMiB;
  if (testing::limit_locked_memory(small) != 0) return 10;
  const PinnedLimit limit = pinned_limit();
  if (limit.cap_ipc_lock) return 11;
  if (limit.lockable_bytes() != std::optional<std::int64_t>(small)) return 12;
  if (!limit.allows(0, small / 2) || !mlock_succeeds(small / 2)) return 13;
  if (limit.allows(0, 2 * small) || mlock_succeeds(2 * small)) return 14;
  return 0;
}

TEST(PinnedLimitDeathTest, WithoutCapIpcLockTheRlimitHoldsAndMlockAgrees) {
  if (testing::address_sanitizer)
    GTEST_SKIP() << "AddressSanitizer makes mlock a no-op that succeeds";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(limited_process_agrees_with_mlock()), ::testing::ExitedWithCode(0), "");
}

TEST(PinnedLimit, RefusalAndFixNameTheLimitAndEveryWayToRaiseIt) {
  const std::string fix = raise_pinned_limit_fix(3 * kMiB + 1);
  EXPECT_THAT(fix, HasSubstr("at least 3073 KiB"));
  EXPECT_THAT(fix, HasSubstr("`ulimit -l 3073`"));
  EXPECT_THAT(fix, HasSubstr("/etc/security/limits.conf"));
  EXPECT_THAT(fix, HasSubstr("--ulimit memlock=-1:-1"));
  EXPECT_THAT(fix, HasSubstr("CAP_IPC_LOCK"));
  const UserError error = pinned_memory_refused(2 * kMiB, "mlock failed", {kMiB, false}, kMiB + 1);
  EXPECT_THAT(error.fix(), HasSubstr(fix));
  EXPECT_THAT(error.fix(), HasSubstr("set pin_memory to false"));
}

}  // namespace
}  // namespace strata::gpu

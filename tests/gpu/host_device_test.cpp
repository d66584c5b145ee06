// What only the host backend promises, beyond the shared contract: errors skip later work and
// travel through events, debug-build pointer checks (use after free), the pinned-memory refusal
// message, and the assertion on an event re-recorded across streams.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/timeline.h"
#include "gpu/host/host_pinned_memory.h"
#include "gpu/open_device.h"
#include "tests/gpu/device_test_util.h"
#include "tests/gpu/memlock_limit.h"

namespace strata::gpu {
namespace {

using testing::Gate;
using ::testing::HasSubstr;

TEST(HostDevice, ErrorSkipsLaterWorkAndTravelsThroughEvents) {
  auto device = create_host_device({});
  auto failed = device->create_event();
  auto downstream = device->create_stream("downstream");
  std::atomic<bool> same_stream_ran{false};
  std::atomic<bool> downstream_ran{false};
  Stream& stream = device->compute_stream();
  stream.launch([] { throw std::runtime_error("attention_forward failed"); });
  stream.launch([&] { same_stream_ran = true; });
  stream.record(*failed);
  downstream->wait(*failed);
  downstream->launch([&] { downstream_ran = true; });
  EXPECT_THROW(downstream->synchronize(), std::runtime_error);
  EXPECT_THROW(stream.synchronize(), std::runtime_error);
  EXPECT_FALSE(same_stream_ran);
  EXPECT_FALSE(downstream_ran);
}

TEST(HostDevice, NegativeBudgetIsAConfigError) {
  DeviceOptions options;
  options.memory_budget_bytes = -1;
  try {
    create_host_device(options);
    FAIL() << "a negative budget was accepted";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("strata.device_memory_budget"));
    EXPECT_EQ(error.exit_status(), 2);
  }
}

TEST(HostDevice, OpenDeviceFallsBackToTheHostDeviceWithoutAGpu) {
  if (testing::cuda_unavailable_reason().empty()) {
    GTEST_SKIP() << "a usable GPU is present: open_device opens it (the 'cuda' device tests)";
  }
  auto device = open_device({});
  EXPECT_EQ(device->kind(), DeviceKind::host);
}

#ifdef NDEBUG
constexpr bool debug_build = false;
#else
constexpr bool debug_build = true;
#endif

TEST(HostDeviceDeathTest, CopyFromFreedDeviceMemoryAbortsNamingThePointer) {
  if (!debug_build) GTEST_SKIP() << "pointer checks run in debug builds only (NDEBUG is defined)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto device = create_host_device({});
        PinnedBuffer host = device->allocate_pinned(64);
        DeviceBuffer buffer = device->allocate(64, "freed");
        void* stale = buffer.data();
        buffer.reset();
        device->d2h_stream().copy(host.data(), stale, 64, CopyKind::device_to_host);
      },
      "copy source pointer 0x[0-9a-f]+ \\(64 bytes\\) on stream 'd2h' is not inside a live device "
      "allocation");
}

TEST(HostDeviceDeathTest, BufferFreedWhileItsCopyIsQueuedAborts) {
  if (!debug_build) GTEST_SKIP() << "pointer checks run in debug builds only (NDEBUG is defined)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto device = create_host_device({});
        PinnedBuffer host = device->allocate_pinned(64);
        DeviceBuffer buffer = device->allocate(64, "freed too early");
        Gate gate;
        device->h2d_stream().launch(gate.waiter());
        device->h2d_stream().copy(buffer.data(), host.data(), 64, CopyKind::host_to_device);
        buffer.reset();  // the copy has not run yet: an engine bug
        gate.open();
        device->h2d_stream().synchronize();
      },
      "copy target pointer 0x[0-9a-f]+ \\(64 bytes\\) on stream 'h2d' is not inside a live device "
      "allocation");
}

TEST(HostDeviceDeathTest, RangePastTheEndOfABufferAborts) {
  if (!debug_build) GTEST_SKIP() << "pointer checks run in debug builds only (NDEBUG is defined)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto device = create_host_device({});
        DeviceBuffer buffer = device->allocate(100, "short");
        device->compute_stream().fill_zero(buffer.as<char>() + 50, 51);
      },
      "fill_zero target pointer .* is not inside a live device allocation");
}

TEST(HostDeviceDeathTest, HostPointerPassedAsDeviceMemoryAborts) {
  if (!debug_build) GTEST_SKIP() << "pointer checks run in debug builds only (NDEBUG is defined)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto device = create_host_device({});
        PinnedBuffer source = device->allocate_pinned(64);
        PinnedBuffer target = device->allocate_pinned(64);
        device->h2d_stream().copy(target.data(), source.data(), 64, CopyKind::host_to_device);
      },
      "wrong CopyKind");
}

TEST(HostDevice, DebugBuildsPoisonFreshDeviceMemoryAsNan) {
  if (!debug_build) GTEST_SKIP() << "device memory is poisoned in debug builds only";
  auto device = create_host_device({});
  DeviceBuffer buffer = device->allocate(16, "never written");
  PinnedBuffer host = device->allocate_pinned(16);
  device->d2h_stream().copy(host.data(), buffer.data(), 16, CopyKind::device_to_host);
  device->d2h_stream().synchronize();
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(std::isnan(host.as<float>()[i]));
}

TEST(HostDeviceDeathTest, ReRecordingAPendingEventOnAnotherStreamAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto device = create_host_device({});
        auto event = device->create_event();
        Gate gate;
        device->compute_stream().launch(gate.waiter());
        device->compute_stream().record(*event);
        device->d2h_stream().record(*event);
      },
      "recorded on stream 'd2h' while its previous record on stream 'compute' has not run yet");
}

// A host task must never wait for work queued after it: enqueueing from a task (a full queue
// would wait for the task's own stream) and synchronizing from one stop the program. The task
// here enqueues on another stream with room to spare; it is stopped all the same.
TEST(HostDeviceDeathTest, AHostTaskThatEnqueuesOrSynchronizesAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto device = create_host_device({});
        Stream& other = device->d2h_stream();
        device->compute_stream().launch([&other] { other.launch([] {}); });
        device->compute_stream().synchronize();
      },
      "running_host_task");
  EXPECT_DEATH(
      {
        auto device = create_host_device({});
        Stream& other = device->d2h_stream();
        device->compute_stream().launch([&other] { other.synchronize(); });
        device->compute_stream().synchronize();
      },
      "running_host_task");
  EXPECT_DEATH(
      {
        auto device = create_host_device({});
        auto event = device->create_event();
        Event& waited = *event;
        device->compute_stream().launch([&waited] { waited.synchronize(); });
        device->compute_stream().synchronize();
      },
      "running_host_task");
}

TEST(HostPinnedMemory, RefusalNamesTheRequestTheLimitAndHowToRaiseIt) {
  UserError error = host::pinned_lock_error(64 << 20, ENOMEM, {8 << 20, false}, 4 << 20);
  EXPECT_THAT(error.what(), HasSubstr("64.00 MiB (67108864 bytes)"));
  EXPECT_THAT(error.what(), HasSubstr("ENOMEM"));
  EXPECT_THAT(error.what(), HasSubstr("may lock 8.00 MiB (RLIMIT_MEMLOCK, 8192 KiB"));
  EXPECT_THAT(error.what(), HasSubstr("already holds 4.00 MiB"));
  EXPECT_THAT(error.fix(), HasSubstr("at least 69632 KiB"));
  EXPECT_THAT(error.fix(), HasSubstr("ulimit -l"));
  EXPECT_THAT(error.fix(), HasSubstr("/etc/security/limits.conf"));
  EXPECT_THAT(error.fix(), HasSubstr("--ulimit memlock"));
}

// Drops CAP_IPC_LOCK (root ignores RLIMIT_MEMLOCK with it), lowers the limit, and asks for more.
// Returns 0 when allocate_pinned threw the expected UserError.
int pinned_refusal_in_this_process() {
  if (testing::limit_locked_memory(64 * 1024) != 0) return 10;
  auto device = create_host_device({});
  try {
    PinnedBuffer refused = device->allocate_pinned(1 << 20);
    return 13;
  } catch (const UserError& error) {
    std::string what = error.what();
    if (what.find("1.00 MiB") == std::string::npos) return 14;
    if (what.find("64.00 KiB (RLIMIT_MEMLOCK, 64 KiB") == std::string::npos) return 15;
    if (error.fix().find("ulimit -l") == std::string::npos) return 16;
  }
  return device->pinned_bytes_in_use() == 0 ? 0 : 17;
}

TEST(HostPinnedMemoryDeathTest, LockedMemoryLimitTooLowIsAUserError) {
  if (testing::address_sanitizer) {
    GTEST_SKIP() << "AddressSanitizer replaces mlock with a no-op that always succeeds";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(pinned_refusal_in_this_process()), ::testing::ExitedWithCode(0), "");
}

// While the timeline records, each op's span is on its stream's lane and carries the label of
// the scope that enqueued it: the timeline says which module a kernel or a copy belonged to.
TEST(HostDevice, TimelineSpansCarryTheEnqueuingScope) {
  auto device = create_host_device({});
  Stream& stream = device->compute_stream();
  DeviceBuffer buffer = device->allocate(4096, "timeline");
  std::vector<std::byte> host(4096);
  base::timeline().start();
  {
    const base::Timeline::Scope scope("host", "forward", "h.1");
    stream.launch([] {});
    stream.copy(host.data(), buffer.data(), 4096, CopyKind::device_to_host);
  }
  stream.fill_zero(buffer.data(), 4096);
  stream.synchronize();
  base::timeline().stop();
  std::vector<std::string> compute;
  for (const base::Timeline::Span& span : base::timeline().spans())
    if (span.lane == "compute") compute.push_back(span.label);
  EXPECT_THAT(compute, ::testing::ElementsAre("task forward h.1", "copy d2h forward h.1", "fill"));
}

}  // namespace
}  // namespace strata::gpu

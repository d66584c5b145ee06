// gpu::Device against its interface: memory budget and exact accounting, pinned memory,
// transfer counters, device-wide synchronize.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "base/error.h"
#include "gpu/plain_copy.h"
#include "tests/gpu/device_test_util.h"

namespace strata::gpu {
namespace {

using testing::DeviceTest;
using testing::Gate;
using ::testing::HasSubstr;

constexpr std::int64_t mib = 1 << 20;

using DeviceMemoryTest = DeviceTest;
STRATA_INSTANTIATE_DEVICE_TESTS(DeviceMemoryTest);

TEST_P(DeviceMemoryTest, ReportsNameKindAndConfiguredBudget) {
  DeviceOptions options;
  options.memory_budget_bytes = 3 * mib;
  auto device = open(options);
  EXPECT_FALSE(device->name().empty());
  EXPECT_EQ(device->kind(), GetParam() == "host" ? DeviceKind::host : DeviceKind::cuda);
  EXPECT_EQ(device->budget_bytes(), 3 * mib);
  EXPECT_EQ(device->bytes_in_use(), 0);
  EXPECT_EQ(device->peak_bytes_in_use(), 0);
  EXPECT_EQ(device->compute_stream().name(), "compute");
  EXPECT_EQ(device->h2d_stream().name(), "h2d");
  EXPECT_EQ(device->d2h_stream().name(), "d2h");
}

TEST_P(DeviceMemoryTest, DefaultBudgetIsPositive) {
  auto device = open();
  EXPECT_GT(device->budget_bytes(), 0);
}

TEST_P(DeviceMemoryTest, AccountingIsExactAndFreeingReturnsBudget) {
  DeviceOptions options;
  options.memory_budget_bytes = 4 * mib;
  auto device = open(options);
  {
    DeviceBuffer a = device->allocate(1000, "a");
    DeviceBuffer b = device->allocate(333, "b");
    DeviceBuffer c = device->allocate(1, "c");
    EXPECT_EQ(a.bytes(), 1000);
    EXPECT_EQ(device->bytes_in_use(), 1334);
    EXPECT_EQ(device->peak_bytes_in_use(), 1334);
    b.reset();
    EXPECT_TRUE(b.empty());
    EXPECT_EQ(device->bytes_in_use(), 1001);
    EXPECT_EQ(device->peak_bytes_in_use(), 1334);
    device->reset_peak();
    EXPECT_EQ(device->peak_bytes_in_use(), 1001);
    DeviceBuffer empty = device->allocate(0, "nothing");
    EXPECT_TRUE(empty.empty());
    EXPECT_EQ(device->bytes_in_use(), 1001);
  }
  EXPECT_EQ(device->bytes_in_use(), 0);
  EXPECT_EQ(device->peak_bytes_in_use(), 1001);
}

TEST_P(DeviceMemoryTest, AllocationsAre256ByteAligned) {
  auto device = open();
  std::vector<DeviceBuffer> buffers;
  for (std::int64_t bytes : {1, 7, 255, 257, 4097}) {
    buffers.push_back(device->allocate(bytes, "alignment"));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffers.back().data()) % 256, 0u) << bytes;
  }
}

TEST_P(DeviceMemoryTest, MovingABufferMovesOwnership) {
  auto device = open();
  DeviceBuffer first = device->allocate(100, "first");
  void* data = first.data();
  DeviceBuffer moved(std::move(first));
  EXPECT_TRUE(first.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(device->bytes_in_use(), 100);
  DeviceBuffer other = device->allocate(50, "other");
  other = std::move(moved);  // frees the 50 bytes other held
  EXPECT_EQ(device->bytes_in_use(), 100);
  EXPECT_EQ(other.data(), data);
}

TEST_P(DeviceMemoryTest, OverBudgetThrowsUserErrorNamingRequestBudgetAndConfigKey) {
  DeviceOptions options;
  options.memory_budget_bytes = 1 * mib;
  auto device = open(options);
  DeviceBuffer held = device->allocate(700 * 1024, "layer 2 weights");
  try {
    DeviceBuffer refused = device->allocate(400 * 1024, "layer 3 weights");
    FAIL() << "an allocation over the budget succeeded";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("layer 3 weights"));
    EXPECT_THAT(error.what(), HasSubstr("409600 bytes"));   // the request
    EXPECT_THAT(error.what(), HasSubstr("1048576 bytes"));  // the budget
    EXPECT_THAT(error.what(), HasSubstr("700.00 KiB already in use"));
    EXPECT_THAT(error.fix(), HasSubstr("strata.device_memory_budget"));
  }
  EXPECT_EQ(device->bytes_in_use(), 700 * 1024);  // a refused allocation takes nothing
  held.reset();
  DeviceBuffer whole = device->allocate(1 * mib, "exactly the budget");
  EXPECT_EQ(device->bytes_in_use(), 1 * mib);
  EXPECT_THROW(device->allocate(1, "one byte more"), UserError);
}

TEST_P(DeviceMemoryTest, ConcurrentAllocationsNeverExceedTheBudget) {
  DeviceOptions options;
  options.memory_budget_bytes = 64 * 1024;
  auto device = open(options);
  std::atomic<int> refusals{0};
  auto churn = [&](int seed) {
    for (int i = 0; i < 400; ++i) {
      std::int64_t bytes = 1000 + (i * 7919 + seed * 104729) % 20000;
      try {
        DeviceBuffer buffer = device->allocate(bytes, "churn");
        EXPECT_LE(device->bytes_in_use(), device->budget_bytes());
      } catch (const UserError&) {
        refusals.fetch_add(1);
      }
    }
  };
  {
    std::jthread first(churn, 1);
    std::jthread second(churn, 2);
    std::jthread third(churn, 3);
  }
  EXPECT_EQ(device->bytes_in_use(), 0);
  EXPECT_LE(device->peak_bytes_in_use(), device->budget_bytes());
}

TEST_P(DeviceMemoryTest, PinnedMemoryIsPageAlignedWritableAndCountedInPages) {
  auto device = open();
  std::int64_t expected_locked = 0;
  std::vector<PinnedBuffer> buffers;
  for (std::int64_t bytes :
       {std::int64_t{1}, std::int64_t{4095}, std::int64_t{4096}, std::int64_t{4097}, mib + 3}) {
    PinnedBuffer buffer = device->allocate_pinned(bytes);
    ASSERT_FALSE(buffer.empty());
    EXPECT_EQ(buffer.bytes(), bytes);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffer.data()) % 4096, 0u) << bytes;
    std::memset(buffer.data(), 0x5A, static_cast<std::size_t>(bytes));
    expected_locked += (bytes + 4095) / 4096 * 4096;
    buffers.push_back(std::move(buffer));
  }
  EXPECT_EQ(device->pinned_bytes_in_use(), expected_locked);
  EXPECT_EQ(device->bytes_in_use(), 0);  // pinned memory is not device memory
  buffers.clear();
  EXPECT_EQ(device->pinned_bytes_in_use(), 0);
  EXPECT_TRUE(device->allocate_pinned(0).empty());
}

TEST_P(DeviceMemoryTest, TransferCountersCountBytesPerDirection) {
  auto device = open();
  PinnedBuffer host = device->allocate_pinned(4096);
  DeviceBuffer first = device->allocate(4096, "first");
  DeviceBuffer second = device->allocate(4096, "second");
  TransferCounters before = device->transfer_counters();
  Stream& stream = device->compute_stream();
  stream.copy(first.data(), host.data(), 100, CopyKind::host_to_device);
  stream.copy(second.data(), first.data(), 25, CopyKind::device_to_device);
  stream.copy(host.data(), second.data(), 50, CopyKind::device_to_host);
  stream.copy(host.as<char>() + 2048, host.data(), 10, CopyKind::host_to_host);
  stream.synchronize();
  TransferCounters after = device->transfer_counters();
  EXPECT_EQ(after.bytes_h2d - before.bytes_h2d, 100);
  EXPECT_EQ(after.bytes_d2d - before.bytes_d2d, 25);
  EXPECT_EQ(after.bytes_d2h - before.bytes_d2h, 50);
  EXPECT_EQ(after.bytes_h2h - before.bytes_h2h, 10);
}

// The benchmarks' bound: the backend's own copy, outside the streams, in every direction.
TEST_P(DeviceMemoryTest, PlainCopyMovesTheBytesInEveryDirection) {
  auto device = open();
  constexpr std::int64_t bytes = 4099;
  PinnedBuffer source = device->allocate_pinned(bytes);
  PinnedBuffer target = device->allocate_pinned(bytes);
  DeviceBuffer first = device->allocate(bytes, "first");
  DeviceBuffer second = device->allocate(bytes, "second");
  for (std::int64_t i = 0; i < bytes; ++i)
    source.as<unsigned char>()[i] = static_cast<unsigned char>(i * 7 + 1);
  std::memset(target.data(), 0, bytes);
  plain_copy(*device, first.data(), source.data(), bytes, CopyKind::host_to_device);
  plain_copy(*device, second.data(), first.data(), bytes, CopyKind::device_to_device);
  plain_copy(*device, target.data(), second.data(), bytes, CopyKind::device_to_host);
  EXPECT_EQ(std::memcmp(target.data(), source.data(), bytes), 0);
  plain_copy(*device, target.data(), source.data(), 0, CopyKind::host_to_host);
}

using DeviceSynchronizeTest = DeviceTest;
STRATA_INSTANTIATE_DEVICE_TESTS(DeviceSynchronizeTest);

TEST_P(DeviceSynchronizeTest, WaitsForEveryStreamIncludingCreatedOnes) {
  auto device = open();
  auto comm = device->create_stream("comm");
  Gate gate;
  std::atomic<int> ran{0};
  std::vector<Stream*> streams = {&device->compute_stream(), &device->h2d_stream(),
                                  &device->d2h_stream(), comm.get()};
  for (Stream* stream : streams) {
    stream->launch(gate.waiter());
    stream->launch([&ran] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 0);
  gate.open();
  device->synchronize();
  EXPECT_EQ(ran.load(), 4);
}

TEST_P(DeviceSynchronizeTest, RethrowsAnErrorFromAnyStreamOnce) {
  auto device = open();
  auto comm = device->create_stream("comm");
  comm->launch([] { throw std::runtime_error("all-gather failed"); });
  try {
    device->synchronize();
    FAIL() << "the error was lost";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "all-gather failed");
  }
  EXPECT_NO_THROW(device->synchronize());
}

}  // namespace
}  // namespace strata::gpu

// The counting device: its buffers are counted address space, its streams run nothing, and the
// ops and collectives made for it count their calls and drop them.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "base/error.h"
#include "gpu/comm.h"
#include "gpu/counting/counting_comm.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"

namespace strata::gpu {
namespace {

constexpr std::int64_t kTiB = std::int64_t{1} << 40;

TEST(CountingDevice, CountsBuffersLargerThanTheMachine) {
  std::unique_ptr<Device> device = create_counting_device();
  EXPECT_EQ(device->kind(), DeviceKind::counting);
  {
    DeviceBuffer large = device->allocate(kTiB, "a terabyte of parameters");
    DeviceBuffer small = device->allocate(1000, "norms");
    ASSERT_TRUE(large && small);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(large.data()) % 256, 0u);
    EXPECT_EQ(device->bytes_in_use(), kTiB + 1000);
    PinnedBuffer pinned = device->allocate_pinned(5000);
    EXPECT_EQ(device->pinned_bytes_in_use(), 8192);  // locked bytes: whole pages
  }
  EXPECT_EQ(device->bytes_in_use(), 0);
  EXPECT_EQ(device->peak_bytes_in_use(), kTiB + 1000);
  EXPECT_EQ(device->pinned_bytes_in_use(), 0);
  EXPECT_TRUE(device->allocate(0, "nothing").empty());
}

TEST(CountingDeviceDeathTest, ABufferIsNotMemory) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::unique_ptr<Device> device = create_counting_device();
  DeviceBuffer buffer = device->allocate(4096, "parameters");
  volatile const std::byte* first = buffer.as<std::byte>();
  EXPECT_DEATH(static_cast<void>(*first), "");
}

// In a child process: limits the address space to what the process maps now (its first page
// count in statm) and 256 MiB more, then asks the counting device for a terabyte. Exits 3 with the
// error's cause and fix on stderr when it is a UserError.
[[noreturn]] void allocate_past_an_address_space_limit() {
  int status = 0;
  {  // the device is gone before exit(), so that a leak check at exit finds nothing
    std::unique_ptr<Device> device = create_counting_device();
    std::ifstream statm("/proc/self/statm");
    std::int64_t pages = 0;
    statm >> pages;
    const auto limit = static_cast<rlim_t>(pages * sysconf(_SC_PAGESIZE) + (256 << 20));
    const rlimit address_space{limit, limit};
    if (setrlimit(RLIMIT_AS, &address_space) != 0) std::exit(2);
    try {
      static_cast<void>(device->allocate(kTiB, "a terabyte of parameters"));
    } catch (const UserError& error) {
      std::fprintf(stderr, "%s | %s\n", error.what(), error.fix().c_str());
      status = 3;
    }
  }
  std::exit(status);
}

// Address space is what a plan spends: a process limited below the plan's buffers (ulimit -v) is
// told so, with the fix.
TEST(CountingDeviceDeathTest, AnAddressSpaceLimitIsAUserError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(allocate_past_an_address_space_limit(), ::testing::ExitedWithCode(3),
              "could not reserve 1099511627776 bytes of address space for a terabyte of "
              "parameters.*ulimit -v");
}

TEST(CountingDevice, StreamsRunNothingAndEventsAreComplete) {
  std::unique_ptr<Device> device = create_counting_device();
  std::vector<float> host(4, 1.0f);
  DeviceBuffer buffer = device->allocate(16, "four floats");
  Stream& stream = device->compute_stream();
  bool ran = false;
  stream.launch([&ran] { ran = true; });
  stream.copy(host.data(), buffer.data(), 16, CopyKind::device_to_host);
  std::unique_ptr<Event> event = device->create_event();
  stream.record(*event);
  EXPECT_TRUE(event->query());
  std::unique_ptr<Stream> created = device->create_stream("comm");
  created->wait(*event);
  device->synchronize();
  EXPECT_FALSE(ran);
  EXPECT_EQ(stream.host_functions(), 1);
  EXPECT_EQ(host, std::vector<float>(4, 1.0f));  // the copy was counted, not run
  EXPECT_EQ(device->transfer_counters().bytes_d2h, 16);
}

TEST(CountingDevice, OpsAreDroppedWithTheirStreamsWork) {
  std::unique_ptr<Device> device = create_counting_device();
  std::unique_ptr<Ops> ops = create_ops(*device, {});
  std::vector<float> values(8, 2.0f);
  ops->fill(device->compute_stream(), values.data(), 5.0f, 8);
  device->synchronize();
  EXPECT_EQ(values, std::vector<float>(8, 2.0f));
}

TEST(CountingComm, CountsCollectivesOfAPlannedWorld) {
  std::unique_ptr<Device> device = create_counting_device();
  std::unique_ptr<Comm> comm = counting::create_counting_comm(4, 2);
  EXPECT_EQ(comm->rank(), 2);
  EXPECT_EQ(comm->world_size(), 4);
  std::vector<float> gathered(4 * 10, 0.0f);
  comm->all_gather(device->compute_stream(), gathered.data() + 2 * 10, gathered.data(), 10,
                   DataType::float32);
  comm->reduce_scatter(device->compute_stream(), gathered.data(), gathered.data() + 20, 10,
                       DataType::float32, ReduceOp::avg);
  device->synchronize();
  EXPECT_EQ(gathered, std::vector<float>(40, 0.0f));
  const CommCounters counters = comm->counters();
  EXPECT_EQ(counters[CollectiveKind::all_gather].calls, 1);
  EXPECT_EQ(counters[CollectiveKind::all_gather].bytes_received, 4 * 10 * 4);
  EXPECT_EQ(counters[CollectiveKind::reduce_scatter].bytes_sent, 4 * 10 * 4);
}

}  // namespace
}  // namespace strata::gpu

// gpu::Event against its interface: query, host synchronize, re-recording, timing, lifetime.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>

#include "tests/gpu/device_test_util.h"

namespace strata::gpu {
namespace {

using testing::DeviceTest;
using testing::Gate;

using EventTest = DeviceTest;
STRATA_INSTANTIATE_DEVICE_TESTS(EventTest);

TEST_P(EventTest, NeverRecordedEventIsComplete) {
  auto device = open();
  auto event = device->create_event();
  EXPECT_TRUE(event->query());
  EXPECT_NO_THROW(event->synchronize());
}

TEST_P(EventTest, QueryIsFalseUntilTheRecordedWorkHasRun) {
  auto device = open();
  auto event = device->create_event();
  Gate gate;
  std::atomic<bool> ran{false};
  device->compute_stream().launch(gate.waiter());
  device->compute_stream().launch([&ran] { ran = true; });
  device->compute_stream().record(*event);
  EXPECT_FALSE(event->query());
  gate.open();
  event->synchronize();  // blocks until the task before the record has run
  EXPECT_TRUE(ran);
  EXPECT_TRUE(event->query());
}

TEST_P(EventTest, RecordingAgainMovesThePoint) {
  auto device = open();
  auto event = device->create_event();
  Stream& stream = device->compute_stream();
  stream.record(*event);
  event->synchronize();
  EXPECT_TRUE(event->query());
  Gate gate;
  stream.launch(gate.waiter());
  stream.record(*event);
  EXPECT_FALSE(event->query());
  gate.open();
  event->synchronize();
  EXPECT_TRUE(event->query());
}

// A wait takes the event's point when it is issued: recording the event again afterwards (here
// behind a closed gate) does not hold back the waiting stream.
TEST_P(EventTest, AWaitKeepsThePointCurrentWhenItWasIssued) {
  auto device = open();
  auto event = device->create_event();
  auto waiter_done = device->create_event();
  auto waiter = device->create_stream("waiter");
  device->compute_stream().record(*event);
  waiter->wait(*event);
  Gate gate;
  device->compute_stream().launch(gate.waiter());
  device->compute_stream().record(*event);
  // A copy, not a host task, proves the waiter ran: on CUDA the gated task may hold the driver
  // thread that runs every stream's host tasks.
  PinnedBuffer flag = device->allocate_pinned(16);
  DeviceBuffer staging = device->allocate(8, "flag");
  flag.as<std::int64_t>()[0] = 42;
  flag.as<std::int64_t>()[1] = 0;
  waiter->copy(staging.data(), flag.data(), 8, CopyKind::host_to_device);
  waiter->copy(flag.as<std::int64_t>() + 1, staging.data(), 8, CopyKind::device_to_host);
  waiter->record(*waiter_done);
  waiter_done->synchronize();  // would never return if the wait had taken the new point
  EXPECT_EQ(flag.as<std::int64_t>()[1], 42);
  EXPECT_FALSE(event->query());
  gate.open();
  event->synchronize();
}

TEST_P(EventTest, ElapsedTimeIsOrderedAndAntisymmetric) {
  auto device = open();
  auto start = device->create_event();
  auto end = device->create_event();
  Stream& stream = device->compute_stream();
  std::atomic<std::uint64_t> sink{0};
  stream.record(*start);
  stream.launch([&sink] {
    std::uint64_t sum = 0;
    for (std::uint64_t i = 0; i < 1'000'000; ++i)
      sum += i ^ (sum >> 3);
    sink = sum;
  });
  stream.record(*end);
  end->synchronize();
  start->synchronize();
  double forward_ms = end->elapsed_ms(*start);
  EXPECT_GE(forward_ms, 0.0);
  EXPECT_DOUBLE_EQ(start->elapsed_ms(*end), -forward_ms);
  EXPECT_DOUBLE_EQ(start->elapsed_ms(*start), 0.0);
}

TEST_P(EventTest, DestroyingAnEventWithAPendingRecordIsSafe) {
  auto device = open();
  Stream& stream = device->compute_stream();
  auto other = device->create_stream("other");
  Gate gate;
  stream.launch(gate.waiter());
  {
    auto event = device->create_event();
    stream.record(*event);
    other->wait(*event);
    // Both the record and the wait are still queued when the event goes.
  }
  gate.open();
  EXPECT_NO_THROW(device->synchronize());
}

}  // namespace
}  // namespace strata::gpu

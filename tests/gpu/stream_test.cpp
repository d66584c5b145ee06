// gpu::Stream against its interface: FIFO order, asynchrony, copies in every direction, waits
// across streams, errors, draining at destruction, and a stress test over several streams.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gpu/ops.h"
#include "tests/gpu/device_test_util.h"

namespace strata::gpu {
namespace {

using testing::DeviceTest;
using testing::Gate;

std::vector<unsigned char> random_bytes(std::int64_t count, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::vector<unsigned char> bytes(static_cast<std::size_t>(count));
  for (auto& byte : bytes)
    byte = static_cast<unsigned char>(engine());
  return bytes;
}

using StreamTest = DeviceTest;
STRATA_INSTANTIATE_DEVICE_TESTS(StreamTest);

// Element i+1 is copied from element i, one op each: only in-order execution carries the value
// from element 0 to the last. The queue is shallower than the chain, so enqueueing also blocks
// on a full queue and resumes.
TEST_P(StreamTest, ManySmallOpsRunInEnqueueOrder) {
  DeviceOptions options;
  options.stream_queue_depth = 16;
  auto device = open(options);
  constexpr std::int64_t count = 2000;
  DeviceBuffer chain = device->allocate(count * 4, "chain");
  PinnedBuffer host = device->allocate_pinned(count * 4);
  auto* values = host.as<std::int32_t>();
  values[0] = 42;
  auto* links = chain.as<std::int32_t>();
  Stream& stream = device->compute_stream();
  stream.fill_zero(chain.data(), chain.bytes());
  stream.copy(links, values, 4, CopyKind::host_to_device);
  for (std::int64_t i = 0; i + 1 < count; ++i) {
    stream.copy(links + i + 1, links + i, 4, CopyKind::device_to_device);
  }
  stream.copy(values, links, count * 4, CopyKind::device_to_host);
  stream.synchronize();
  for (std::int64_t i = 0; i < count; ++i)
    ASSERT_EQ(values[i], 42) << "element " << i;
}

TEST_P(StreamTest, LaunchedTasksRunInEnqueueOrder) {
  DeviceOptions options;
  options.stream_queue_depth = 8;
  auto device = open(options);
  std::vector<int> order;
  order.reserve(1000);
  for (int i = 0; i < 1000; ++i)
    device->compute_stream().launch([&order, i] { order.push_back(i); });
  device->compute_stream().synchronize();
  std::vector<int> expected(1000);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(order, expected);
}

// A launched task is a host function, which holds the stream's later work until the CPU has run
// it; the backend's own ops are kernels (on the host backend, tasks marked HostTask::kernel), and
// copies, fills and events are none of it.
TEST_P(StreamTest, HostFunctionsCountsLaunchedTasksOnly) {
  auto device = open();
  std::unique_ptr<Ops> ops = create_ops(*device);
  Stream& stream = device->compute_stream();
  DeviceBuffer values = device->allocate(64 * 4, "values");
  PinnedBuffer host = device->allocate_pinned(64 * 4);
  auto event = device->create_event();
  const std::int64_t before = stream.host_functions();
  stream.fill_zero(values.data(), values.bytes());
  ops->fill(stream, values.as<float>(), 1.5f, 64);
  stream.copy(host.data(), values.data(), values.bytes(), CopyKind::device_to_host);
  stream.record(*event);
  EXPECT_EQ(stream.host_functions(), before);
  int ran = 0;
  stream.launch([&ran] { ++ran; });
  stream.launch([&ran] { ++ran; });
  EXPECT_EQ(stream.host_functions(), before + 2);
  EXPECT_EQ(device->d2h_stream().host_functions(), 0);
  stream.synchronize();
  EXPECT_EQ(ran, 2);
  EXPECT_EQ(host.as<float>()[63], 1.5f);
}

TEST_P(StreamTest, CopyReturnsBeforeItRuns) {
  auto device = open();
  PinnedBuffer source = device->allocate_pinned(64);
  PinnedBuffer target = device->allocate_pinned(64);
  std::memset(source.data(), 1, 64);
  std::memset(target.data(), 2, 64);
  Stream& stream = device->h2d_stream();
  Gate gate;
  stream.launch(gate.waiter());
  stream.copy(target.data(), source.data(), 64, CopyKind::host_to_host);
  // The stream is held at the gate, so the copy cannot have run yet.
  EXPECT_EQ(target.as<unsigned char>()[63], 2);
  gate.open();
  stream.synchronize();
  EXPECT_EQ(target.as<unsigned char>()[63], 1);
}

// Upload on the H2D stream, copy on the compute stream, download on the D2H stream, ordered by
// events only, for sizes that are not multiples of anything, from pinned and pageable memory.
TEST_P(StreamTest, AsyncCopiesRoundTripThroughTheDevice) {
  auto device = open();
  auto uploaded = device->create_event();
  auto computed = device->create_event();
  std::uint64_t seed = 7;
  for (std::int64_t bytes :
       {std::int64_t{1}, std::int64_t{13}, std::int64_t{4099}, std::int64_t{3 * (1 << 20) + 17}}) {
    std::vector<unsigned char> expected = random_bytes(bytes, seed++);
    DeviceBuffer first = device->allocate(bytes, "first");
    DeviceBuffer second = device->allocate(bytes, "second");
    PinnedBuffer pinned_in = device->allocate_pinned(bytes);
    PinnedBuffer pinned_out = device->allocate_pinned(bytes);
    std::vector<unsigned char> pageable_out(static_cast<std::size_t>(bytes));
    std::memcpy(pinned_in.data(), expected.data(), expected.size());

    device->h2d_stream().copy(first.data(), pinned_in.data(), bytes, CopyKind::host_to_device);
    device->h2d_stream().record(*uploaded);
    device->compute_stream().wait(*uploaded);
    device->compute_stream().copy(second.data(), first.data(), bytes, CopyKind::device_to_device);
    device->compute_stream().record(*computed);
    device->d2h_stream().wait(*computed);
    device->d2h_stream().copy(pinned_out.data(), second.data(), bytes, CopyKind::device_to_host);
    device->d2h_stream().copy(pageable_out.data(), second.data(), bytes, CopyKind::device_to_host);
    device->d2h_stream().synchronize();

    EXPECT_EQ(std::memcmp(pinned_out.data(), expected.data(), expected.size()), 0) << bytes;
    EXPECT_EQ(pageable_out, expected) << bytes;
  }
}

TEST_P(StreamTest, FillZeroClearsExactlyTheRange) {
  auto device = open();
  constexpr std::int64_t bytes = 1000;
  DeviceBuffer buffer = device->allocate(bytes, "fill");
  PinnedBuffer host = device->allocate_pinned(bytes);
  std::memset(host.data(), 0xAB, bytes);
  Stream& stream = device->compute_stream();
  stream.copy(buffer.data(), host.data(), bytes, CopyKind::host_to_device);
  stream.fill_zero(buffer.as<unsigned char>() + 100, 333);
  stream.copy(host.data(), buffer.data(), bytes, CopyKind::device_to_host);
  stream.synchronize();
  const auto* result = host.as<unsigned char>();
  for (std::int64_t i = 0; i < bytes; ++i) {
    ASSERT_EQ(result[i], (i >= 100 && i < 433) ? 0 : 0xAB) << "byte " << i;
  }
}

// The D2H copy must wait for the compute stream's upload, which is held at a gate: without the
// event wait it would download the zeros.
TEST_P(StreamTest, CopyOnD2hStreamWaitsForComputeStreamWork) {
  auto device = open();
  constexpr std::int64_t count = 4096;
  DeviceBuffer buffer = device->allocate(count * 4, "activations");
  PinnedBuffer source = device->allocate_pinned(count * 4);
  PinnedBuffer target = device->allocate_pinned(count * 4);
  std::iota(source.as<std::int32_t>(), source.as<std::int32_t>() + count, 1);
  std::memset(target.data(), 0, count * 4);
  device->compute_stream().fill_zero(buffer.data(), buffer.bytes());
  device->compute_stream().synchronize();

  Gate gate;
  auto produced = device->create_event();
  auto downloaded = device->create_event();
  device->compute_stream().launch(gate.waiter());
  device->compute_stream().copy(buffer.data(), source.data(), count * 4, CopyKind::host_to_device);
  device->compute_stream().record(*produced);
  device->d2h_stream().wait(*produced);
  device->d2h_stream().copy(target.data(), buffer.data(), count * 4, CopyKind::device_to_host);
  device->d2h_stream().record(*downloaded);

  EXPECT_FALSE(downloaded->query());  // the host was not blocked, and the D2H stream waits
  gate.open();
  downloaded->synchronize();
  for (std::int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(target.as<std::int32_t>()[i], i + 1) << "element " << i;
  }
}

TEST_P(StreamTest, WaitOnAnEventNeverRecordedDoesNotWait) {
  auto device = open();
  auto never = device->create_event();
  std::atomic<bool> ran{false};
  device->compute_stream().wait(*never);
  device->compute_stream().launch([&ran] { ran = true; });
  device->compute_stream().synchronize();
  EXPECT_TRUE(ran);
}

TEST_P(StreamTest, ExceptionInATaskIsRethrownBySynchronizeThenCleared) {
  auto device = open();
  Stream& stream = device->compute_stream();
  stream.launch([] { throw std::runtime_error("layer_norm_backward failed"); });
  try {
    stream.synchronize();
    FAIL() << "the error was lost";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "layer_norm_backward failed");
  }
  EXPECT_NO_THROW(stream.synchronize());
  std::atomic<bool> ran{false};
  stream.launch([&ran] { ran = true; });
  stream.synchronize();
  EXPECT_TRUE(ran) << "the stream works again after its error was reported";
}

TEST_P(StreamTest, ExceptionInATaskIsRethrownByAnEventRecordedAfterIt) {
  auto device = open();
  auto after = device->create_event();
  Stream& stream = device->compute_stream();
  stream.launch([] { throw std::invalid_argument("bad shape"); });
  stream.record(*after);
  EXPECT_THROW(after->synchronize(), std::invalid_argument);
  EXPECT_TRUE(after->query());
  EXPECT_THROW(after->synchronize(), std::invalid_argument);  // every waiter hears of it
  EXPECT_THROW(stream.synchronize(), std::invalid_argument);
}

// Destroying a stream runs the work still queued on it: the work waits behind a gate that is
// opened just before the stream goes, so the destructor finds it queued. The thread that opens
// the gate is the one that enqueued the work, so all of it must fit in the queue at once: a full
// queue blocks the enqueuing thread, which then never reaches the gate. The queue is bounded on
// every backend (CUDA's pending-launch queue holds about a thousand entries; the host backend's
// is set to 64 here, so that it is the tighter of the two), and the test queues less than that:
// queueing 1,000 operations hung on CUDA.
TEST_P(StreamTest, DestroyingAStreamRunsItsQueuedWork) {
  DeviceOptions options;
  options.stream_queue_depth = 64;
  auto device = open(options);
  constexpr std::int64_t count = 24;
  constexpr std::int64_t queued_ops = 2 * count + 1;  // the gate, then a task and a copy each
  static_assert(queued_ops < 64);
  DeviceBuffer buffer = device->allocate(count * 8, "buffer");
  PinnedBuffer source = device->allocate_pinned(count * 8);
  PinnedBuffer target = device->allocate_pinned(count * 8);
  std::iota(source.as<std::int64_t>(), source.as<std::int64_t>() + count, 100);
  std::atomic<std::int64_t> ran{0};
  {
    auto stream = device->create_stream("short-lived");
    Gate gate;
    stream->launch(gate.waiter());
    for (std::int64_t i = 0; i < count; ++i) {
      stream->launch([&ran] { ran.fetch_add(1); });
      stream->copy(buffer.as<std::int64_t>() + i, source.as<std::int64_t>() + i, 8,
                   CopyKind::host_to_device);
    }
    EXPECT_EQ(ran.load(), 0);
    gate.open();
    // `stream` is destroyed here with (almost certainly) most of its work still queued.
  }
  EXPECT_EQ(ran.load(), count);
  device->compute_stream().copy(target.data(), buffer.data(), count * 8, CopyKind::device_to_host);
  device->compute_stream().synchronize();
  for (std::int64_t i = 0; i < count; ++i)
    ASSERT_EQ(target.as<std::int64_t>()[i], 100 + i);
}

TEST_P(StreamTest, DestroyingAStreamWithAnUnreportedErrorDoesNotThrow) {
  auto device = open();
  auto stream = device->create_stream("failing");
  stream->launch([] { throw std::runtime_error("nobody asked"); });
  EXPECT_NO_THROW(stream.reset());
}

// Four streams pass a value along a pipeline, one slot per iteration: stream 0 uploads, each
// next stream waits for the previous one's event and copies the slot on, the last downloads.
// Events are re-recorded every iteration, so each wait must take the point current when it was
// issued. Host waits on random events are mixed in.
TEST_P(StreamTest, StressManyStreamsOrderedByEvents) {
  DeviceOptions options;
  options.stream_queue_depth = 32;
  auto device = open(options);
  constexpr int stream_count = 4;
  constexpr std::int64_t iterations = 300;
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<std::unique_ptr<Event>> events;
  std::vector<DeviceBuffer> stages;
  for (int s = 0; s < stream_count; ++s) {
    streams.push_back(device->create_stream("stage" + std::to_string(s)));
    events.push_back(device->create_event());
    stages.push_back(device->allocate(iterations * 8, "stage"));
  }
  PinnedBuffer source = device->allocate_pinned(iterations * 8);
  PinnedBuffer target = device->allocate_pinned(iterations * 8);
  std::mt19937_64 engine(2024);
  for (std::int64_t i = 0; i < iterations; ++i)
    source.as<std::uint64_t>()[i] = engine();
  std::memset(target.data(), 0, iterations * 8);

  for (std::int64_t i = 0; i < iterations; ++i) {
    auto slot = [&](int s) { return stages[static_cast<std::size_t>(s)].as<std::uint64_t>() + i; };
    streams[0]->copy(slot(0), source.as<std::uint64_t>() + i, 8, CopyKind::host_to_device);
    streams[0]->record(*events[0]);
    for (int s = 1; s < stream_count; ++s) {
      streams[static_cast<std::size_t>(s)]->wait(*events[static_cast<std::size_t>(s - 1)]);
      streams[static_cast<std::size_t>(s)]->copy(slot(s), slot(s - 1), 8,
                                                 CopyKind::device_to_device);
      streams[static_cast<std::size_t>(s)]->record(*events[static_cast<std::size_t>(s)]);
    }
    streams.back()->copy(target.as<std::uint64_t>() + i, slot(stream_count - 1), 8,
                         CopyKind::device_to_host);
    if (engine() % 16 == 0) events[engine() % stream_count]->synchronize();
  }
  device->synchronize();
  for (std::int64_t i = 0; i < iterations; ++i) {
    ASSERT_EQ(target.as<std::uint64_t>()[i], source.as<std::uint64_t>()[i]) << "iteration " << i;
  }
  for (auto& event : events)
    EXPECT_TRUE(event->query());
}

// Several host threads enqueue on their own streams at once while waiting on each other's events.
TEST_P(StreamTest, StressConcurrentProducers) {
  auto device = open();
  constexpr int producer_count = 3;
  constexpr int rounds = 200;
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<std::unique_ptr<Event>> events;
  for (int p = 0; p < producer_count; ++p) {
    streams.push_back(device->create_stream("producer" + std::to_string(p)));
    events.push_back(device->create_event());
  }
  std::vector<std::atomic<int>> counters(producer_count);
  {
    std::vector<std::jthread> producers;
    for (int p = 0; p < producer_count; ++p) {
      producers.emplace_back([&, p] {
        auto& stream = *streams[static_cast<std::size_t>(p)];
        const Event& neighbour = *events[static_cast<std::size_t>((p + 1) % producer_count)];
        for (int r = 0; r < rounds; ++r) {
          stream.wait(neighbour);
          stream.launch([&counters, p] { counters[static_cast<std::size_t>(p)].fetch_add(1); });
          stream.record(*events[static_cast<std::size_t>(p)]);
        }
        stream.synchronize();
      });
    }
  }
  device->synchronize();
  for (auto& counter : counters)
    EXPECT_EQ(counter.load(), rounds);
}

}  // namespace
}  // namespace strata::gpu

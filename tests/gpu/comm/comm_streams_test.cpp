// Collectives as stream work: FIFO order on a stream, order across streams of one Comm, overlap
// with the compute stream (shown with events and futures, never sleeps), the traffic counters,
// errors on the stream, a Comm destroyed with work queued, and a barrier beside queued work.

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <stdexcept>
#include <vector>

#include "tests/gpu/comm/comm_test_util.h"

namespace strata::gpu::testing {
namespace {

// A bound on waits that should end at once: a failure instead of a hang when overlap is broken.
constexpr auto overlap_timeout = std::chrono::seconds(60);

Bytes as_bytes(const std::vector<float>& values) {
  Bytes bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<float> as_floats(const Bytes& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

// Three collectives on one stream, each reading what the one before wrote, while the compute
// stream runs its own chain of tasks: the results are right only if they ran in enqueue order.
TEST_F(CommTest, CollectivesOnOneStreamRunInEnqueueOrderWhileComputeRuns) {
  constexpr std::int64_t count = 64;
  DeviceBuffer data = upload(as_bytes(std::vector<float>(count, static_cast<float>(rank() + 1))));
  DeviceBuffer gathered = zeros(count * world_size() * 4);
  std::vector<float> compute_values(count, 0.0f);
  Stream& compute = device_->compute_stream();
  for (int step = 0; step < 8; ++step) {
    compute.launch([values = compute_values.data()] {
      for (std::int64_t i = 0; i < count; ++i)
        values[i] += 1.0f;
    });
  }
  // broadcast root 0 (every rank: 1), then sum (world_size), then gather (world_size everywhere).
  comm_->broadcast(*stream_, data.data(), count, DataType::float32, 0);
  comm_->all_reduce(*stream_, data.data(), count, DataType::float32, ReduceOp::sum);
  comm_->all_gather(*stream_, data.data(), gathered.data(), count, DataType::float32);
  comm_->all_reduce(*stream_, gathered.data(), count * world_size(), DataType::float32,
                    ReduceOp::max);
  compute.synchronize();
  const std::vector<float> result = as_floats(download(gathered, count * world_size() * 4));
  for (float value : result)
    ASSERT_EQ(value, static_cast<float>(world_size()));
  for (float value : compute_values)
    ASSERT_EQ(value, 8.0f);
}

// One Comm used from two streams with no event between them: the Comm runs its collectives in
// the order they were enqueued, the same order on every rank, so none pairs with the wrong one.
TEST_F(CommTest, OneCommOnTwoStreamsRunsInEnqueueOrder) {
  std::unique_ptr<Stream> other = device_->create_stream("comm2");
  constexpr int rounds = 6;
  const std::int64_t count = 301;
  std::vector<DeviceBuffer> buffers;
  for (int round = 0; round < rounds; ++round) {
    buffers.push_back(upload(make_input(DataType::float32, rank(), count, 20 + round)));
  }
  for (int round = 0; round < rounds; ++round) {
    Stream& stream = round % 2 == 0 ? *stream_ : *other;
    comm_->all_reduce(stream, buffers[static_cast<std::size_t>(round)].data(), count,
                      DataType::float32, ReduceOp::sum);
  }
  other->synchronize();
  for (int round = 0; round < rounds; ++round) {
    std::vector<Bytes> inputs;
    for (int r = 0; r < world_size(); ++r) {
      inputs.push_back(make_input(DataType::float32, r, count, 20 + round));
    }
    EXPECT_EQ(download(buffers[static_cast<std::size_t>(round)], count * 4),
              reference_reduce(DataType::float32, ReduceOp::sum, inputs, 0, count))
        << "round " << round;
  }
}

// A compute-stream task that can only finish once the all-gather on the comm stream has run:
// if the comm stream waited for the compute stream (no overlap), this would time out. The
// compute stream then consumes the gathered weights after an event, as the coordinator does.
TEST_F(CommTest, AllGatherOnTheCommStreamOverlapsComputeStreamWork) {
  const std::int64_t count = 1000;
  DeviceBuffer shard = upload(make_input(DataType::bfloat16, rank(), count, 30));
  DeviceBuffer full = zeros(count * 2 * world_size());
  Stream& compute = device_->compute_stream();
  std::promise<void> gathered;
  std::future<void> gathered_seen = gathered.get_future();
  bool compute_saw_gather = false;
  compute.launch([&gathered_seen, &compute_saw_gather] {
    compute_saw_gather = gathered_seen.wait_for(overlap_timeout) == std::future_status::ready;
  });
  comm_->all_gather(*stream_, shard.data(), full.data(), count, DataType::bfloat16);
  std::unique_ptr<Event> ready = device_->create_event();
  stream_->record(*ready);
  stream_->launch([&gathered] { gathered.set_value(); });

  // The compute stream reads the gathered weights only after the event.
  Bytes seen(static_cast<std::size_t>(count * 2 * world_size()));
  compute.wait(*ready);
  compute.copy(seen.data(), full.data(), count * 2 * world_size(), CopyKind::device_to_host);
  compute.synchronize();
  EXPECT_TRUE(compute_saw_gather) << "the all-gather did not run while compute was busy";
  for (int r = 0; r < world_size(); ++r) {
    EXPECT_EQ(Bytes(seen.begin() + r * count * 2, seen.begin() + (r + 1) * count * 2),
              make_input(DataType::bfloat16, r, count, 30));
  }
}

// The counters follow the table in gpu/comm.h exactly, per kind, and reset.
TEST_F(CommTest, CountersCountBytesIntoAndOutOfEachCollective) {
  const int n = world_size();
  DeviceBuffer a = zeros(4 * 100 * n);
  DeviceBuffer b = zeros(4 * 100 * n);
  comm_->all_gather(*stream_, a.data(), b.data(), 100, DataType::float32);
  comm_->all_gather(*stream_, a.data(), b.data(), 30, DataType::bfloat16);
  comm_->reduce_scatter(*stream_, a.data(), b.data(), 50, DataType::float16, ReduceOp::sum);
  comm_->all_reduce(*stream_, a.data(), 7, DataType::int64, ReduceOp::max);
  comm_->broadcast(*stream_, a.data(), 11, DataType::uint8, 0);
  stream_->synchronize();
  comm_->barrier();
  const CommCounters counters = comm_->counters();
  const CollectiveTraffic& gather = counters[CollectiveKind::all_gather];
  EXPECT_EQ(gather.calls, 2);
  EXPECT_EQ(gather.bytes_sent, 400 + 60);
  EXPECT_EQ(gather.bytes_received, (400 + 60) * n);
  const CollectiveTraffic& scatter = counters[CollectiveKind::reduce_scatter];
  EXPECT_EQ(scatter.calls, 1);
  EXPECT_EQ(scatter.bytes_sent, 100 * n);
  EXPECT_EQ(scatter.bytes_received, 100);
  const CollectiveTraffic& reduce = counters[CollectiveKind::all_reduce];
  EXPECT_EQ(reduce.calls, 1);
  EXPECT_EQ(reduce.bytes_sent, 56);
  EXPECT_EQ(reduce.bytes_received, 56);
  const CollectiveTraffic& broadcast = counters[CollectiveKind::broadcast];
  EXPECT_EQ(broadcast.calls, 1);
  EXPECT_EQ(broadcast.bytes_sent, rank() == 0 ? 11 : 0);
  EXPECT_EQ(broadcast.bytes_received, rank() == 0 ? 0 : 11);

  comm_->reset_counters();
  for (CollectiveKind kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter,
                              CollectiveKind::all_reduce, CollectiveKind::broadcast}) {
    EXPECT_EQ(comm_->counters()[kind].calls, 0) << to_string(kind);
    EXPECT_EQ(comm_->counters()[kind].bytes_sent, 0) << to_string(kind);
    EXPECT_EQ(comm_->counters()[kind].bytes_received, 0) << to_string(kind);
  }
}

// Every rank's stream fails before a collective, so the stream skips it on every rank; a later
// collective of the same Comm on another stream must not wait for the skipped one.
TEST_F(CommTest, ACollectiveSkippedAfterAStreamErrorDoesNotBlockTheNextOne) {
  std::unique_ptr<Stream> failing = device_->create_stream("failing");
  DeviceBuffer skipped = upload(make_input(DataType::float32, rank(), 5, 40));
  DeviceBuffer data = upload(make_input(DataType::float32, rank(), 5, 41));
  failing->launch([] { throw std::runtime_error("injected failure"); });
  comm_->all_reduce(*failing, skipped.data(), 5, DataType::float32, ReduceOp::sum);
  comm_->all_reduce(*stream_, data.data(), 5, DataType::float32, ReduceOp::sum);
  EXPECT_THROW(failing->synchronize(), std::runtime_error);
  std::vector<Bytes> inputs;
  for (int r = 0; r < world_size(); ++r)
    inputs.push_back(make_input(DataType::float32, r, 5, 41));
  EXPECT_EQ(download(data, 20), reference_reduce(DataType::float32, ReduceOp::sum, inputs, 0, 5));
  EXPECT_EQ(download(skipped, 20), make_input(DataType::float32, rank(), 5, 40));
}

// Destroying a Comm with a collective still queued waits for it instead of freeing the
// communicator under it.
TEST_F(CommTest, DestroyingACommWaitsForItsQueuedCollectives) {
  const std::int64_t count = 2000;
  const int ranks = world_size();
  DeviceBuffer data = upload(make_input(DataType::float32, rank(), count, 50));
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  stream_->launch([released] { released.wait(); });
  comm_->all_reduce(*stream_, data.data(), count, DataType::float32, ReduceOp::sum);
  std::future<void> destroyed = std::async(std::launch::async, [this] { comm_.reset(); });
  if (test_world().uses_mpi()) {
    // The collective cannot have run yet, so the destructor is still waiting for it.
    EXPECT_EQ(destroyed.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  }
  release.set_value();
  destroyed.get();
  std::vector<Bytes> inputs;
  for (int r = 0; r < ranks; ++r)
    inputs.push_back(make_input(DataType::float32, r, count, 50));
  EXPECT_EQ(download(data, count * 4),
            reference_reduce(DataType::float32, ReduceOp::sum, inputs, 0, count));
  comm_ = create_comm(test_world(), *device_);
}

// barrier() blocks the calling thread only, not the streams, and waits for no queued collective:
// with a collective held back on the comm stream on every rank, three barriers still return on
// every rank (a barrier that waited for the stream would time out here instead of hanging), they
// move nothing the counters count, and the held collective then runs and pairs across the ranks
// as if no barrier had come between.
TEST_F(CommTest, BarrierReturnsWhileACollectiveIsQueuedAndLeavesItWhole) {
  const std::int64_t count = 300;
  DeviceBuffer data = upload(make_input(DataType::float32, rank(), count, 60));
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  stream_->launch([released] { released.wait(); });
  comm_->all_reduce(*stream_, data.data(), count, DataType::float32, ReduceOp::sum);
  comm_->reset_counters();

  std::future<void> barriers = std::async(std::launch::async, [this] {
    for (int i = 0; i < 3; ++i)
      comm_->barrier();
  });
  const bool returned = barriers.wait_for(overlap_timeout) == std::future_status::ready;
  EXPECT_TRUE(returned) << "barrier() waited for the collective queued on the comm stream";
  for (CollectiveKind kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter,
                              CollectiveKind::all_reduce, CollectiveKind::broadcast}) {
    EXPECT_EQ(comm_->counters()[kind].calls, 0) << to_string(kind);
  }
  release.set_value();
  barriers.get();
  std::vector<Bytes> inputs;
  for (int r = 0; r < world_size(); ++r)
    inputs.push_back(make_input(DataType::float32, r, count, 60));
  EXPECT_EQ(download(data, count * 4),
            reference_reduce(DataType::float32, ReduceOp::sum, inputs, 0, count));
}

}  // namespace
}  // namespace strata::gpu::testing

// What each collective computes: every dtype, every op, odd and zero counts, in place, the
// chunked MPI path, and the same bits on every rank and in every run.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "gpu/host/mpi_comm.h"
#include "tests/gpu/comm/comm_test_util.h"

namespace strata::gpu::testing {
namespace {

constexpr std::int64_t odd_counts[] = {0, 1, 7, 1001, 2053};

std::string describe(DataType type, std::int64_t count) {
  return std::string(to_string(type)) + " count=" + std::to_string(count);
}

std::string describe(DataType type, ReduceOp op, std::int64_t count) {
  return describe(type, count) + " op=" + std::string(to_string(op));
}

std::vector<Bytes> inputs_of_all_ranks(DataType type, int ranks, std::int64_t count,
                                       std::uint64_t salt) {
  std::vector<Bytes> inputs;
  for (int r = 0; r < ranks; ++r)
    inputs.push_back(make_input(type, r, count, salt));
  return inputs;
}

TEST_F(CommTest, RanksMatchTheWorld) {
  EXPECT_EQ(comm_->rank(), test_world().rank());
  EXPECT_EQ(comm_->world_size(), test_world().world_size());
  EXPECT_EQ(comm_->backend(), test_world().uses_mpi() ? "mpi" : "solo");
}

TEST_F(CommTest, AllGatherConcatenatesEveryRanksBlockInRankOrder) {
  for (DataType type : all_types) {
    for (std::int64_t count : odd_counts) {
      SCOPED_TRACE(describe(type, count));
      const std::int64_t block_bytes = count * size_bytes(type);
      DeviceBuffer send = upload(make_input(type, rank(), count, 1));
      DeviceBuffer receive = zeros(block_bytes * world_size());
      comm_->all_gather(*stream_, send.data(), receive.data(), count, type);
      const Bytes gathered = download(receive, block_bytes * world_size());
      for (int r = 0; r < world_size(); ++r) {
        const Bytes expected = make_input(type, r, count, 1);
        EXPECT_EQ(
            Bytes(gathered.begin() + r * block_bytes, gathered.begin() + (r + 1) * block_bytes),
            expected)
            << "block of rank " << r;
      }
    }
  }
}

TEST_F(CommTest, AllGatherInPlaceReadsThisRanksBlockFromTheReceiveBuffer) {
  const DataType type = DataType::bfloat16;
  const std::int64_t count = 333;
  const std::int64_t block_bytes = count * size_bytes(type);
  Bytes initial(static_cast<std::size_t>(block_bytes * world_size()), std::byte{0x5a});
  const Bytes mine = make_input(type, rank(), count, 2);
  std::copy(mine.begin(), mine.end(), initial.begin() + rank() * block_bytes);
  DeviceBuffer buffer = upload(initial);
  std::byte* base = buffer.as<std::byte>();
  comm_->all_gather(*stream_, base + rank() * block_bytes, base, count, type);
  const Bytes gathered = download(buffer, block_bytes * world_size());
  for (int r = 0; r < world_size(); ++r) {
    EXPECT_EQ(Bytes(gathered.begin() + r * block_bytes, gathered.begin() + (r + 1) * block_bytes),
              make_input(type, r, count, 2))
        << "block of rank " << r;
  }
}

TEST_F(CommTest, ReduceScatterGivesEachRankTheReductionOfItsBlock) {
  for (DataType type : all_types) {
    for (ReduceOp op : all_ops) {
      for (std::int64_t count : odd_counts) {
        SCOPED_TRACE(describe(type, op, count));
        const std::int64_t total = count * world_size();
        const auto inputs = inputs_of_all_ranks(type, world_size(), total, 3);
        DeviceBuffer send = upload(inputs[static_cast<std::size_t>(rank())]);
        DeviceBuffer receive = zeros(count * size_bytes(type));
        comm_->reduce_scatter(*stream_, send.data(), receive.data(), count, type, op);
        EXPECT_EQ(download(receive, count * size_bytes(type)),
                  reference_reduce(type, op, inputs, rank() * count, count));
      }
    }
  }
}

TEST_F(CommTest, ReduceScatterInPlaceWritesIntoThisRanksBlock) {
  const DataType type = DataType::float32;
  const std::int64_t count = 517;
  const std::int64_t block_bytes = count * size_bytes(type);
  const auto inputs = inputs_of_all_ranks(type, world_size(), count * world_size(), 4);
  DeviceBuffer buffer = upload(inputs[static_cast<std::size_t>(rank())]);
  std::byte* base = buffer.as<std::byte>();
  comm_->reduce_scatter(*stream_, base, base + rank() * block_bytes, count, type, ReduceOp::sum);
  const Bytes after = download(buffer, block_bytes * world_size());
  EXPECT_EQ(Bytes(after.begin() + rank() * block_bytes, after.begin() + (rank() + 1) * block_bytes),
            reference_reduce(type, ReduceOp::sum, inputs, rank() * count, count));
}

TEST_F(CommTest, AllReduceGivesEveryRankTheSameReduction) {
  for (DataType type : all_types) {
    for (ReduceOp op : all_ops) {
      for (std::int64_t count : odd_counts) {
        SCOPED_TRACE(describe(type, op, count));
        const auto inputs = inputs_of_all_ranks(type, world_size(), count, 5);
        DeviceBuffer data = upload(inputs[static_cast<std::size_t>(rank())]);
        comm_->all_reduce(*stream_, data.data(), count, type, op);
        const Bytes result = download(data, count * size_bytes(type));
        EXPECT_EQ(result, reference_reduce(type, op, inputs, 0, count));
        expect_same_on_all_ranks(result);
      }
    }
  }
}

TEST_F(CommTest, AllReduceEqualsReduceScatterThenAllGatherBitwise) {
  const DataType type = DataType::float32;
  const std::int64_t count = 1023;  // per rank after the scatter
  const std::int64_t total = count * world_size();
  const std::int64_t total_bytes = total * size_bytes(type);
  const Bytes input = make_input(type, rank(), total, 6);
  DeviceBuffer reduced = upload(input);
  comm_->all_reduce(*stream_, reduced.data(), total, type, ReduceOp::sum);
  DeviceBuffer send = upload(input);
  DeviceBuffer shard = zeros(count * size_bytes(type));
  DeviceBuffer gathered = zeros(total_bytes);
  comm_->reduce_scatter(*stream_, send.data(), shard.data(), count, type, ReduceOp::sum);
  comm_->all_gather(*stream_, shard.data(), gathered.data(), count, type);
  EXPECT_EQ(download(reduced, total_bytes), download(gathered, total_bytes));
}

TEST_F(CommTest, BroadcastCopiesTheRootsDataToEveryRank) {
  for (int root = 0; root < world_size(); ++root) {
    for (DataType type : {DataType::float32, DataType::int64, DataType::uint8}) {
      const std::int64_t count = 777;
      SCOPED_TRACE(describe(type, count) + " root=" + std::to_string(root));
      DeviceBuffer data = upload(make_input(type, rank(), count, 7));
      comm_->broadcast(*stream_, data.data(), count, type, root);
      EXPECT_EQ(download(data, count * size_bytes(type)), make_input(type, root, count, 7));
    }
  }
}

TEST_F(CommTest, RepeatedRunsGiveTheSameBits) {
  const DataType type = DataType::float32;
  const std::int64_t count = 4099;
  const Bytes input = make_input(type, rank(), count * world_size(), 8);
  Bytes first_reduce;
  Bytes first_scatter;
  for (int run = 0; run < 3; ++run) {
    DeviceBuffer data = upload(input);
    comm_->all_reduce(*stream_, data.data(), count * world_size(), type, ReduceOp::avg);
    DeviceBuffer send = upload(input);
    DeviceBuffer shard = zeros(count * size_bytes(type));
    comm_->reduce_scatter(*stream_, send.data(), shard.data(), count, type, ReduceOp::sum);
    const Bytes reduce = download(data, count * world_size() * size_bytes(type));
    const Bytes scatter = download(shard, count * size_bytes(type));
    if (run == 0) {
      first_reduce = reduce;
      first_scatter = scatter;
    } else {
      EXPECT_EQ(reduce, first_reduce) << "all_reduce run " << run;
      EXPECT_EQ(scatter, first_scatter) << "reduce_scatter run " << run;
    }
  }
}

// 256 on rank 0 and 1 on every other rank. Pairwise bf16 sums would lose every 1 (257 rounds to
// 256, tie to even); fp32 accumulation rounds once: with 4 ranks 259 -> 260.
TEST_F(CommTest, Bfloat16AccumulatesInFloat32AndRoundsOnce) {
  const std::uint16_t value = host::kernels::float_to_bf16(rank() == 0 ? 256.0f : 1.0f);
  Bytes input(2);
  std::memcpy(input.data(), &value, 2);
  DeviceBuffer data = upload(input);
  comm_->all_reduce(*stream_, data.data(), 1, DataType::bfloat16, ReduceOp::sum);
  const Bytes result = download(data, 2);
  std::uint16_t bits = 0;
  std::memcpy(&bits, result.data(), 2);
  const float expected = host::kernels::bf16_to_float(
      host::kernels::float_to_bf16(256.0f + static_cast<float>(world_size() - 1)));
  EXPECT_EQ(host::kernels::bf16_to_float(bits), expected);
  if (world_size() == 4) {
    EXPECT_EQ(host::kernels::bf16_to_float(bits), 260.0f);
  }
}

TEST_F(CommTest, MaxPropagatesNanFromAnyRank) {
  const int nan_rank = world_size() - 1;
  const float values[2] = {rank() == nan_rank ? std::numeric_limits<float>::quiet_NaN() : 1.0f,
                           static_cast<float>(rank())};
  Bytes input(sizeof(values));
  std::memcpy(input.data(), values, sizeof(values));
  DeviceBuffer data = upload(input);
  comm_->all_reduce(*stream_, data.data(), 2, DataType::float32, ReduceOp::max);
  float result[2] = {};
  std::memcpy(result, download(data, sizeof(result)).data(), sizeof(result));
  EXPECT_TRUE(std::isnan(result[0]));
  EXPECT_EQ(result[1], static_cast<float>(world_size() - 1));
}

TEST_F(CommTest, IntegerSumsWrapAndAveragesTruncate) {
  const std::int32_t values[2] = {std::numeric_limits<std::int32_t>::max(), rank() == 0 ? -7 : 0};
  Bytes input(sizeof(values));
  std::memcpy(input.data(), values, sizeof(values));
  DeviceBuffer sum = upload(input);
  DeviceBuffer avg = upload(input);
  comm_->all_reduce(*stream_, sum.data(), 2, DataType::int32, ReduceOp::sum);
  comm_->all_reduce(*stream_, avg.data(), 2, DataType::int32, ReduceOp::avg);
  std::int32_t summed[2] = {};
  std::int32_t averaged[2] = {};
  std::memcpy(summed, download(sum, sizeof(summed)).data(), sizeof(summed));
  std::memcpy(averaged, download(avg, sizeof(averaged)).data(), sizeof(averaged));
  const std::int64_t exact = std::int64_t{std::numeric_limits<std::int32_t>::max()} * world_size();
  EXPECT_EQ(summed[0], static_cast<std::int32_t>(exact));
  EXPECT_EQ(summed[1], -7);
  EXPECT_EQ(averaged[0], std::numeric_limits<std::int32_t>::max());
  EXPECT_EQ(averaged[1], -7 / world_size());
}

// Chunks of 6 bytes split elements of every size across several MPI calls per collective.
TEST_F(CommTest, MpiBackendSplitsLargeCollectivesIntoChunks) {
  if (!test_world().uses_mpi()) GTEST_SKIP() << "the MPI backend needs mpirun";
  std::unique_ptr<Comm> chunked = host::create_mpi_comm(test_world(), {.chunk_bytes = 6});
  for (DataType type : all_types) {
    const std::int64_t count = 29;
    SCOPED_TRACE(describe(type, count));
    const std::int64_t element_bytes = size_bytes(type);
    const auto inputs = inputs_of_all_ranks(type, world_size(), count * world_size(), 9);
    const Bytes& mine = inputs[static_cast<std::size_t>(rank())];

    DeviceBuffer reduced = upload(mine);
    chunked->all_reduce(*stream_, reduced.data(), count * world_size(), type, ReduceOp::sum);
    DeviceBuffer send = upload(mine);
    DeviceBuffer shard = zeros(count * element_bytes);
    chunked->reduce_scatter(*stream_, send.data(), shard.data(), count, type, ReduceOp::avg);
    DeviceBuffer gathered = zeros(count * element_bytes * world_size());
    chunked->all_gather(*stream_, send.data(), gathered.data(), count, type);
    DeviceBuffer broadcast = upload(mine);
    chunked->broadcast(*stream_, broadcast.data(), count, type, world_size() - 1);

    EXPECT_EQ(download(reduced, count * world_size() * element_bytes),
              reference_reduce(type, ReduceOp::sum, inputs, 0, count * world_size()));
    EXPECT_EQ(download(shard, count * element_bytes),
              reference_reduce(type, ReduceOp::avg, inputs, rank() * count, count));
    const Bytes all = download(gathered, count * element_bytes * world_size());
    for (int r = 0; r < world_size(); ++r) {
      const Bytes& theirs = inputs[static_cast<std::size_t>(r)];
      EXPECT_EQ(Bytes(all.begin() + r * count * element_bytes,
                      all.begin() + (r + 1) * count * element_bytes),
                Bytes(theirs.begin(), theirs.begin() + count * element_bytes));
    }
    const Bytes& root = inputs[static_cast<std::size_t>(world_size() - 1)];
    EXPECT_EQ(download(broadcast, count * element_bytes),
              Bytes(root.begin(), root.begin() + count * element_bytes));
  }
  stream_->synchronize();
}

}  // namespace
}  // namespace strata::gpu::testing

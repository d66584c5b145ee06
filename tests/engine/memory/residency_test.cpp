#include "engine/memory/residency.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "aio/aligned_buffer.h"
#include "aio/errors.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "gpu/open_device.h"

namespace strata::engine::memory {
namespace {

namespace fs = std::filesystem;

class ResidencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("strata-residency-test-{}-{}", getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  NvmeStoreOptions options() const {
    NvmeStoreOptions result;
    result.nvme_path = root_;
    result.job_name = "residency";
    return result;
  }
  fs::path root_;
};

TEST_F(ResidencyTest, StatesAndExactAccountingThroughAMoveCycle) {
  const std::vector<std::int64_t> sizes = {8192, 4096};
  NvmeStore store(options(), sizes);
  Residency residency;
  const User user = residency.add_user("states");
  aio::AlignedBuffer cpu_only(12288);
  aio::AlignedBuffer staging(8192);
  const PartitionId resident = residency.add_in_cpu(user, "grads", cpu_only.span());
  const PartitionId swapped =
      residency.add_in_cpu_with_extent(user, "states 0", staging.span(), store, 0);
  const PartitionId cold = residency.add_on_nvme(user, "states 1", 4096, store, 1);
  EXPECT_EQ(residency.state(resident), State::in_cpu);
  EXPECT_EQ(residency.state(cold), State::on_nvme);
  ResidencyCounters counters = residency.counters();
  EXPECT_EQ(counters.resident(Tier::cpu), 12288 + 8192);
  EXPECT_EQ(counters.resident(Tier::nvme), 4096);

  std::memset(staging.data(), 0x5a, 8192);
  Residency::Move write = residency.begin_write(residency.view(swapped));
  EXPECT_EQ(residency.state(swapped), State::writing_back);
  EXPECT_EQ(residency.counters().resident(Tier::nvme), 4096 + 8192);  // both tiers
  EXPECT_EQ(residency.counters().resident(Tier::cpu), 12288 + 8192);
  residency.finish_write(std::move(write));
  EXPECT_EQ(residency.state(swapped), State::on_nvme);
  counters = residency.counters();
  EXPECT_EQ(counters.resident(Tier::cpu), 12288);
  EXPECT_EQ(counters.resident(Tier::nvme), 8192 + 4096);
  EXPECT_EQ(counters.moved(Direction::nvme_write), 8192);

  aio::AlignedBuffer other(8192);
  Residency::Move read = residency.begin_read(swapped, other.span());
  EXPECT_EQ(residency.state(swapped), State::reading);
  Residency::CpuView view = residency.finish_read(std::move(read));
  EXPECT_EQ(residency.state(swapped), State::in_cpu);
  ASSERT_EQ(view.bytes().size(), 8192u);
  EXPECT_EQ(view.bytes()[8191], std::byte{0x5a});
  counters = residency.counters();
  EXPECT_EQ(counters.moved(Direction::nvme_read), 8192);
  EXPECT_EQ(counters.resident(Tier::cpu), 12288 + 8192);
  EXPECT_EQ(counters.peak_resident(Tier::nvme), 8192 + 4096);
  residency.drop_clean(std::move(view));
  EXPECT_EQ(residency.state(swapped), State::on_nvme);
  EXPECT_EQ(residency.counters().resident(Tier::gpu), 0);
}

// The rank's one book holds every user's partitions, whichever store holds their extents (the
// parameters may live under another nvme_path than the optimizer's): each move goes to its
// partition's store, and each user's counters are its own while the book's add them up.
TEST_F(ResidencyTest, OneBookCountsEachUserApartOverTwoStores) {
  NvmeStore states_store(options(), std::vector<std::int64_t>{8192});
  NvmeStoreOptions params_options = options();
  params_options.store_name = "params";
  NvmeStore params_store(params_options, std::vector<std::int64_t>{4096});
  Residency book;
  const User states = book.add_user("optimizer states");
  const User params = book.add_user("parameter shards");
  aio::AlignedBuffer states_memory(8192);
  aio::AlignedBuffer params_memory(4096);
  std::memset(states_memory.data(), 0x11, 8192);
  std::memset(params_memory.data(), 0x22, 4096);
  const PartitionId s0 =
      book.add_in_cpu_with_extent(states, "states 0", states_memory.span(), states_store, 0);
  const PartitionId p0 =
      book.add_in_cpu_with_extent(params, "shard 0", params_memory.span(), params_store, 0);
  book.finish_write(book.begin_write(book.view(s0)));
  book.finish_write(book.begin_write(book.view(p0)));
  EXPECT_EQ(book.partition_count(), 2);
  EXPECT_EQ(book.user(s0), states);
  EXPECT_EQ(book.user_name(book.user(p0)), "parameter shards");
  EXPECT_EQ(book.counters(states).moved(Direction::nvme_write), 8192);
  EXPECT_EQ(book.counters(params).moved(Direction::nvme_write), 4096);
  EXPECT_EQ(book.counters().moved(Direction::nvme_write), 8192 + 4096);
  EXPECT_EQ(book.counters(params).resident(Tier::nvme), 4096);

  // Each partition comes back from its own store's file.
  aio::AlignedBuffer back(8192);
  Residency::CpuView shard = book.finish_read(book.begin_read(p0, back.span()));
  EXPECT_EQ(shard.bytes()[4095], std::byte{0x22});
  book.drop_clean(std::move(shard));
  Residency::CpuView group = book.finish_read(book.begin_read(s0, back.span()));
  EXPECT_EQ(group.bytes()[8191], std::byte{0x11});
  book.drop_clean(std::move(group));
  EXPECT_EQ(book.counters(states).moved(Direction::nvme_read), 8192);
  EXPECT_EQ(book.counters(params).moved(Direction::nvme_read), 4096);
  EXPECT_EQ(book.counters().peak_resident(Tier::nvme), 8192 + 4096);
}

TEST_F(ResidencyTest, AFailedReadLeavesThePartitionLostAndNamesTheFile) {
  NvmeStoreOptions faulty = options();
  faulty.faults.fail(1, EIO);
  NvmeStore store(faulty, std::vector<std::int64_t>{4096});
  Residency residency;
  const User user = residency.add_user("p");
  aio::AlignedBuffer buffer(4096);
  const PartitionId id = residency.add_in_cpu_with_extent(user, "p", buffer.span(), store, 0);
  residency.finish_write(residency.begin_write(residency.view(id)));
  try {
    static_cast<void>(residency.finish_read(residency.begin_read(id, buffer.span())));
    FAIL() << "expected IoError";
  } catch (const aio::IoError& error) {
    EXPECT_NE(std::string(error.what()).find(store.swap_file().string()), std::string::npos);
  }
  EXPECT_EQ(residency.state(id), State::lost);
  EXPECT_EQ(residency.counters().resident(Tier::nvme), 0);
  EXPECT_EQ(residency.counters().resident(Tier::cpu), 0);
}

// Many partitions cycled through a small pool by several threads: the pool never lends more than
// it has, CPU residency never exceeds the pool, the bytes survive, the counters add up.
TEST_F(ResidencyTest, StressManyPartitionsThroughASmallPool) {
  constexpr int kPartitions = 96;
  constexpr int kBuffers = 3;
  constexpr std::int64_t kMax = 4 * 4096;
  std::vector<std::int64_t> sizes;
  for (int p = 0; p < kPartitions; ++p)
    sizes.push_back(4096 * (1 + p % 4));
  NvmeStore store(options(), sizes);
  auto device = gpu::create_host_device({});
  PinnedPool pool(*device, kBuffers, kMax);
  Residency residency;
  const User user = residency.add_user("stress");
  std::vector<PartitionId> ids;
  std::int64_t total = 0;
  for (int p = 0; p < kPartitions; ++p) {
    PinnedPool::Lease lease = pool.acquire();
    auto bytes = lease.bytes().first(static_cast<std::size_t>(sizes[static_cast<std::size_t>(p)]));
    std::memset(bytes.data(), 0, bytes.size());
    ids.push_back(residency.add_in_cpu_with_extent(user, fmt::format("p{}", p), bytes, store, p));
    residency.finish_write(residency.begin_write(residency.view(ids.back())));
    total += sizes[static_cast<std::size_t>(p)];
  }
  constexpr int kRounds = 3;
  std::atomic<std::int64_t> peak_cpu{0};
  std::atomic<bool> bad{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round)
        for (int p = t; p < kPartitions; p += 4) {
          PinnedPool::Lease lease = pool.acquire();
          Residency::CpuView view = residency.finish_read(
              residency.begin_read(ids[static_cast<std::size_t>(p)], lease.bytes()));
          const std::int64_t cpu = residency.counters().resident(Tier::cpu);
          std::int64_t seen = peak_cpu.load();
          while (cpu > seen && !peak_cpu.compare_exchange_weak(seen, cpu)) {
          }
          auto* words = reinterpret_cast<std::uint32_t*>(view.bytes().data());
          if (words[0] != static_cast<std::uint32_t>(round)) bad = true;
          for (std::size_t i = 0; i < view.bytes().size() / 4; ++i)
            words[i] = static_cast<std::uint32_t>(round + 1);
          residency.finish_write(residency.begin_write(std::move(view)));
        }
    });
  for (auto& thread : threads)
    thread.join();
  EXPECT_FALSE(bad.load());
  EXPECT_LE(pool.peak_in_use(), kBuffers);
  EXPECT_LE(peak_cpu.load(), kBuffers * kMax);
  const ResidencyCounters counters = residency.counters();
  EXPECT_EQ(counters.resident(Tier::cpu), 0);
  EXPECT_EQ(counters.resident(Tier::nvme), total);
  EXPECT_EQ(counters.moved(Direction::nvme_read), kRounds * total);
  EXPECT_EQ(counters.moved(Direction::nvme_write), (kRounds + 1) * total);
  for (PartitionId id : ids)
    EXPECT_EQ(residency.state(id), State::on_nvme);
}

TEST(ResidencyGpu, UploadAndDownloadThroughTheDevicesStreams) {
  gpu::DeviceOptions device_options;
  device_options.memory_budget_bytes = 1 << 20;
  auto device = gpu::create_host_device(device_options);
  Residency residency;
  const User user = residency.add_user("params");
  aio::AlignedBuffer host(8192);
  for (std::size_t i = 0; i < 8192; ++i)
    host.span()[i] = std::byte{static_cast<unsigned char>(i * 13)};
  const PartitionId id = residency.add_in_cpu(user, "params 0", host.span());
  gpu::DeviceBuffer on_device = device->allocate(8192, "params 0");
  Residency::Move upload =
      residency.begin_upload(residency.view(id), *device, device->h2d_stream(), on_device.data());
  EXPECT_EQ(residency.state(id), State::uploading);
  EXPECT_EQ(residency.counters().resident(Tier::gpu), 8192);
  EXPECT_EQ(residency.counters().resident(Tier::cpu), 8192);
  Residency::GpuView view = residency.finish_upload(std::move(upload));
  EXPECT_EQ(residency.state(id), State::on_gpu);
  EXPECT_EQ(view.device_memory(), on_device.data());
  ResidencyCounters counters = residency.counters();
  EXPECT_EQ(counters.resident(Tier::cpu), 0);
  EXPECT_EQ(counters.resident(Tier::gpu), 8192);
  EXPECT_EQ(counters.moved(Direction::h2d), 8192);

  aio::AlignedBuffer back(8192);
  Residency::Move download =
      residency.begin_download(std::move(view), *device, device->d2h_stream(), back.span());
  EXPECT_EQ(residency.state(id), State::downloading);
  Residency::CpuView cpu = residency.finish_download(std::move(download));
  EXPECT_EQ(residency.state(id), State::in_cpu);
  EXPECT_EQ(cpu.bytes().data(), back.data());
  EXPECT_EQ(std::memcmp(back.data(), host.data(), 8192), 0);
  counters = residency.counters();
  EXPECT_EQ(counters.moved(Direction::d2h), 8192);
  EXPECT_EQ(counters.resident(Tier::gpu), 0);
  EXPECT_EQ(counters.resident(Tier::cpu), 8192);
  EXPECT_EQ(counters.peak_resident(Tier::gpu), 8192);
  device->synchronize();
}

}  // namespace
}  // namespace strata::engine::memory

// The parameter tier on each of its homes (device memory, CPU memory, NVMe, NVMe with some
// modules kept in CPU memory by max_in_cpu): shards written through values() + commit() come
// back from fetch() to the byte, also after they are written again; a range committed by
// another thread is read only once committed; a failed transfer leaves the tier refusing every
// later use, naming the first failure.
#include "engine/zero/param_tier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "aio/fault_plan.h"
#include "base/error.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "gpu/open_device.h"
#include "gpu/stream.h"
#include "tests/engine/zero/error_of.h"

namespace strata::engine::zero {
namespace {

using ::testing::HasSubstr;

// Four modules of 3000, 5000, 100 and 7000 elements: shards of 4096, 6144, 2048 and 8192 (the
// 2048-element alignment), 20480 in all.
FlatLayout four_modules() {
  return FlatLayout({{ParamSpec{"m0", {3000}}},
                     {ParamSpec{"m1", {5000}}},
                     {ParamSpec{"m2", {100}}},
                     {ParamSpec{"m3", {7000}}}},
                    1);
}

// The ranges the tier is written in (an optimizer's sub-groups): they cut modules in pieces.
constexpr std::int64_t kRange = 2 * FlatLayout::kDefaultShardAlignment;

// Where the tier keeps its shards, as the tests name it.
struct Home {
  const char* name;
  OffloadDevice device;
  std::int64_t max_in_cpu;  // nvme: m0 and m2 (6144 elements) stay in CPU memory with 6144
};
const Home kHomes[] = {{"device", OffloadDevice::none, 0},
                       {"cpu", OffloadDevice::cpu, 0},
                       {"nvme", OffloadDevice::nvme, 0},
                       {"nvme, m0 and m2 in cpu", OffloadDevice::nvme, 6144}};

// Element i's 16-bit value in write `round`: every element and round differs.
std::uint16_t value_of(std::int64_t element, int round) {
  return static_cast<std::uint16_t>(element * 7 + round * 4099 + 1);
}

class TierFixture {
 public:
  explicit TierFixture(const Home& home, aio::FaultPlan faults = {})
      : device_(gpu::create_host_device({})), layout_(four_modules()) {
    ParamTierOptions options;
    options.device = home.device;
    options.element_bytes = 2;
    options.max_in_cpu = home.max_in_cpu;
    options.buffer_count = 3;
    options.buffer_size = 1 << 20;
    options.nvme.nvme_path = ::testing::TempDir();
    // ctest runs test cases in parallel: each gets its own swap directory.
    options.nvme.job_name =
        std::string("tier-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    options.nvme.faults = std::move(faults);
    // The tier's memory as the engine plans it: shelves in a pool, partitions in a book, extents
    // in a store; the pool opens once the tier has reserved, then the store, then the tier.
    if (options.device != OffloadDevice::none) {
      pool_ = std::make_unique<memory::PinnedPool>(*device_);
      options.pool = pool_.get();
      options.book = &book_;
    }
    if (options.device == OffloadDevice::nvme) {
      store_ = std::make_unique<memory::NvmeStore>(options.nvme);
      options.store = store_.get();
    }
    tier_ = std::make_unique<ParamTier>(*device_, layout_, options);
    options_ = options;
    if (!pool_) return;
    pool_->open();
    if (store_) store_->open(pool_->pinned_arena());
    tier_->open();
  }
  ~TierFixture() { device_->synchronize(); }

  // Writes range `range` with write `round`'s values.
  void write(Range range, int round) {
    std::span<std::byte> values = tier_->values(range);
    ASSERT_EQ(values.size(), static_cast<std::size_t>(range.size() * 2));
    auto* bits = reinterpret_cast<std::uint16_t*>(values.data());
    for (std::int64_t i = 0; i < range.size(); ++i)
      bits[i] = value_of(range.begin + i, round);
    tier_->commit(range);
  }
  // Writes the whole partition in kRange pieces.
  void write_all(int round) {
    for (std::int64_t begin = 0; begin < layout_.partition_numel(); begin += kRange)
      write(Range{begin, std::min(begin + kRange, layout_.partition_numel())}, round);
  }
  // Module `m`'s shard as write `round` left it.
  std::vector<std::uint16_t> expected_shard(int m, int round) const {
    const ModuleSlice& slice = layout_.module(m);
    std::vector<std::uint16_t> shard(static_cast<std::size_t>(slice.shard_numel));
    for (std::int64_t i = 0; i < slice.shard_numel; ++i)
      shard[static_cast<std::size_t>(i)] = value_of(slice.partition_offset + i, round);
    return shard;
  }
  // Module `m`'s shard fetched to device memory and copied out.
  std::vector<std::uint16_t> fetched(int m) {
    const std::int64_t numel = layout_.module(m).shard_numel;
    gpu::DeviceBuffer target = device_->allocate(numel * 2, "fetched shard");
    tier_->wait_committed(m, device_->compute_stream());
    tier_->fetch(m, device_->compute_stream(), target.data());
    device_->compute_stream().synchronize();
    const auto* bits = target.as<const std::uint16_t>();
    return std::vector<std::uint16_t>(bits, bits + numel);
  }
  // Module `m`'s shard uploaded ahead (a module in CPU memory) and copied out.
  std::vector<std::uint16_t> uploaded_ahead(int m) {
    const std::int64_t numel = layout_.module(m).shard_numel;
    gpu::DeviceBuffer target = device_->allocate(numel * 2, "uploaded shard");
    tier_->upload_ahead(m, target.data())->synchronize();
    const auto* bits = target.as<const std::uint16_t>();
    return std::vector<std::uint16_t>(bits, bits + numel);
  }

  std::unique_ptr<gpu::Device> device_;
  FlatLayout layout_;
  // Before the tier: they outlive it.
  memory::Residency book_;
  std::unique_ptr<memory::PinnedPool> pool_;
  std::unique_ptr<memory::NvmeStore> store_;
  std::unique_ptr<ParamTier> tier_;
  ParamTierOptions options_;  // the tier's
};

// Forward then backward order (the last module of forward is the first of backward, fetched
// again from its buffer on NVMe), twice, with a new write of every range in between.
TEST(ParamTier, ShardsWrittenComeBackToTheByteOnEveryHome) {
  for (const Home& home : kHomes) {
    SCOPED_TRACE(home.name);
    TierFixture f(home);
    EXPECT_EQ(f.tier_->device(), home.device);
    for (int round = 0; round < 2; ++round) {
      f.write_all(round);
      for (int m : {0, 1, 2, 3, 3, 2, 1, 0}) {
        if (home.device == OffloadDevice::nvme) f.tier_->prefetch(m);
        ASSERT_EQ(f.fetched(m), f.expected_shard(m, round)) << "module " << m << " round " << round;
      }
    }
    EXPECT_FALSE(f.tier_->inconsistent());
  }
}

// A tier of the plan alone (the memory estimate's) places every shard where the real tier of the
// same options does, and holds none: nothing to fetch from the device, no read to start.
TEST(ParamTier, APlannedTierPlacesShardsWhereTheRealOneDoes) {
  for (const Home& home : kHomes) {
    SCOPED_TRACE(home.name);
    TierFixture f(home);
    ParamTier planned(f.layout_, f.options_, ParamTier::PlanOnly{});
    EXPECT_EQ(planned.device(), home.device);
    for (int m = 0; m < f.layout_.module_count(); ++m) {
      EXPECT_EQ(planned.in_cpu(m), f.tier_->in_cpu(m)) << "module " << m;
      EXPECT_EQ(planned.on_nvme(m), f.tier_->on_nvme(m)) << "module " << m;
      EXPECT_EQ(planned.device_shard(m), nullptr);
      EXPECT_TRUE(planned.prefetch(m));
      if (planned.in_cpu(m)) {
        EXPECT_EQ(planned.upload_ahead(m, nullptr), nullptr);
      }
    }
    EXPECT_EQ(planned.nvme_bytes(), 0);
    EXPECT_EQ(planned.nvme_read_bytes(), 0);
  }
}

// Which modules live where, and the bytes each home moves: only NVMe reads and writes.
TEST(ParamTier, EachHomeKeepsItsModulesWhereItSays) {
  for (const Home& home : kHomes) {
    SCOPED_TRACE(home.name);
    TierFixture f(home);
    f.write_all(0);
    for (int m = 0; m < f.layout_.module_count(); ++m) {
      const bool cpu = home.device == OffloadDevice::cpu ||
                       (home.device == OffloadDevice::nvme && home.max_in_cpu > 0 && m % 2 == 0);
      EXPECT_EQ(f.tier_->in_cpu(m), cpu) << "module " << m;
      EXPECT_EQ(f.tier_->on_nvme(m), home.device == OffloadDevice::nvme && !cpu) << "module " << m;
      EXPECT_EQ(f.tier_->device_shard(m) != nullptr, home.device == OffloadDevice::none);
      if (cpu) {
        EXPECT_EQ(f.uploaded_ahead(m), f.expected_shard(m, 0)) << "module " << m;
      }
      EXPECT_EQ(f.fetched(m), f.expected_shard(m, 0)) << "module " << m;
    }
    const bool nvme = home.device == OffloadDevice::nvme;
    EXPECT_EQ(f.tier_->nvme_bytes() > 0, nvme);
    EXPECT_EQ(f.tier_->nvme_write_bytes() > 0, nvme);
    EXPECT_EQ(f.tier_->nvme_read_bytes() > 0, nvme);
    EXPECT_EQ(f.tier_->committed_upload_bytes() > 0, home.device == OffloadDevice::none);
  }
}

// The device tier: the partition itself holds what was written.
TEST(ParamTier, TheDeviceTiersPartitionHoldsWhatWasWritten) {
  TierFixture f(kHomes[0]);
  f.write_all(3);
  f.device_->synchronize();
  const auto* bits = reinterpret_cast<const std::uint16_t*>(f.tier_->device_partition());
  for (std::int64_t i = 0; i < f.layout_.partition_numel(); ++i)
    ASSERT_EQ(bits[i], value_of(i, 3)) << "element " << i;
}

// The optimizer's thread commits an expected range while this thread reads: a prefetch of a
// module it covers is refused until then, wait_committed returns once it is committed, and the
// fetch brings the new values (on the device tier the stream waits for the commit's upload).
TEST(ParamTier, AnExpectedRangeIsReadOnlyOnceCommitted) {
  for (const Home& home : kHomes) {
    SCOPED_TRACE(home.name);
    TierFixture f(home);
    f.write_all(0);
    const Range covering{0, kRange};  // module 0 exactly
    f.tier_->expect(covering);
    if (home.device == OffloadDevice::nvme) {
      EXPECT_FALSE(f.tier_->prefetch(0));
    }
    EXPECT_EQ(f.fetched(3), f.expected_shard(3, 0));  // beside the range: no wait
    std::jthread optimizer([&] { f.write(covering, 1); });
    EXPECT_EQ(f.fetched(0), f.expected_shard(0, 1));
    optimizer.join();
    EXPECT_LE(f.tier_->commit_waits(), 1);
    EXPECT_EQ(f.tier_->upload_waits(), home.device == OffloadDevice::none ? 1 : 0);
    if (home.device == OffloadDevice::nvme) {
      EXPECT_TRUE(f.tier_->prefetch(0));
    }
  }
}

// The optimizer's thread fails: a reader of its ranges fails with its cause and fix (the first
// one given), and reads elsewhere go on.
TEST(ParamTier, AForgoneRangeFailsItsReaderWithTheFirstCause) {
  TierFixture f(kHomes[1]);
  f.write_all(0);
  f.tier_->expect(Range{0, kRange});
  std::jthread optimizer([&] {
    f.tier_->forgo_expected("writing the swap file failed", "free space on the disk");
    f.tier_->forgo_expected("a later failure", "another fix");
  });
  for (int call = 0; call < 2; ++call) {
    try {
      f.fetched(0);
      FAIL() << "the read of a forgone range returned";
    } catch (const UserError& error) {
      EXPECT_THAT(error.what(), HasSubstr("writing the swap file failed"));
      EXPECT_EQ(error.fix(), "free space on the disk");
    }
  }
  EXPECT_EQ(f.fetched(3), f.expected_shard(3, 0));
  EXPECT_FALSE(f.tier_->inconsistent());  // its shards are as they were
}

// Completions 0-5 are the first writes (kRange pieces: m0; m1's first part; m1's second and m2;
// m3 in two parts); 6 is the first read. A failed read loses the shard: the tier is
// inconsistent, and every later fetch and commit refuses, naming that first failure.
TEST(ParamTier, AFailedReadMakesEveryLaterCallNameIt) {
  TierFixture f(kHomes[2], aio::FaultPlan(7).fail(6, EIO));
  f.write_all(0);
  const UserError first = error_of([&] { f.fetched(0); });
  EXPECT_THAT(first.what(), HasSubstr("reading a parameter shard failed"));
  EXPECT_THAT(first.what(), HasSubstr(strerror(EIO)));
  EXPECT_THAT(first.what(), HasSubstr("now inconsistent"));
  EXPECT_THAT(first.fix(), HasSubstr("training cannot continue from this state"));
  EXPECT_TRUE(f.tier_->inconsistent());
  for (int call = 0; call < 2; ++call) {
    const UserError later = error_of([&] { f.fetched(1); });
    EXPECT_THAT(later.what(), HasSubstr("inconsistent since an earlier transfer failed"));
    EXPECT_THAT(later.what(), HasSubstr(strerror(EIO)));
    EXPECT_EQ(later.fix(), "training cannot continue from this state");
  }
  const UserError written = error_of([&] { f.write(Range{kRange, 2 * kRange}, 1); });
  EXPECT_THAT(written.what(), HasSubstr("inconsistent since an earlier transfer failed"));
  EXPECT_THAT(written.what(), HasSubstr(strerror(EIO)));
}

// A failed write of new parameters: the commit says so, and later reads name it.
TEST(ParamTier, AFailedWriteMakesEveryLaterCallNameIt) {
  TierFixture f(kHomes[2], aio::FaultPlan(7).fail(3, ENOSPC));
  const UserError first = error_of([&] { f.write_all(0); });
  EXPECT_THAT(first.what(), HasSubstr("writing the new parameter shards failed"));
  EXPECT_THAT(first.what(), HasSubstr(strerror(ENOSPC)));
  EXPECT_TRUE(f.tier_->inconsistent());
  const UserError later = error_of([&] { f.fetched(0); });
  EXPECT_THAT(later.what(), HasSubstr("inconsistent since an earlier transfer failed"));
  EXPECT_THAT(later.what(), HasSubstr(strerror(ENOSPC)));
}

// The plan is what the tier holds: where each shard lives, the device partition, the read
// buffers and the swap file; and the staging the optimizer's ranges pass through (kRange pieces:
// with m0 and m2 in CPU memory, every range but m0's touches a module on NVMe).
TEST(ParamTier, ThePlanIsWhatTheTierHolds) {
  for (const Home& home : kHomes) {
    SCOPED_TRACE(home.name);
    TierFixture f(home);
    ParamTierOptions options;
    options.device = home.device;
    options.max_in_cpu = home.max_in_cpu;
    options.buffer_count = 3;
    for (std::int64_t begin = 0; begin < f.layout_.partition_numel(); begin += kRange)
      options.committed_ranges.push_back({begin, begin + kRange});
    const ParamTierPlan plan = ParamTier::plan(options, f.layout_);
    std::int64_t extent_bytes = 0;
    for (int m = 0; m < f.layout_.module_count(); ++m) {
      EXPECT_EQ(f.tier_->in_cpu(m), plan.cpu_offset[m] >= 0) << "module " << m;
      EXPECT_EQ(f.tier_->on_nvme(m), plan.nvme_extent[m] >= 0) << "module " << m;
      if (plan.nvme_extent[m] >= 0) extent_bytes += f.layout_.module(m).shard_numel * 2;
    }
    EXPECT_EQ(plan.device_bytes, home.device == OffloadDevice::none ? 20480 * 2 : 0);
    EXPECT_EQ(f.tier_->nvme_bytes(), extent_bytes);
    EXPECT_EQ(plan.swap_buffers.reserved(), f.tier_->swap_shelf() >= 0);
    if (f.tier_->swap_shelf() >= 0) {
      EXPECT_EQ(f.pool_->buffer_count(f.tier_->swap_shelf()), plan.swap_buffers.count);
      EXPECT_EQ(f.pool_->buffer_size_bytes(f.tier_->swap_shelf()), plan.swap_buffers.buffer_bytes);
    }
    const bool staged = home.device != OffloadDevice::cpu;
    EXPECT_EQ(plan.staging.count, staged ? (home.device == OffloadDevice::none ? 2 : 1) : 0);
    EXPECT_EQ(plan.staging.buffer_bytes, staged ? kRange * 2 : 0);
    EXPECT_EQ(plan.staging_in_pool, home.device == OffloadDevice::none);
  }
}

}  // namespace
}  // namespace strata::engine::zero

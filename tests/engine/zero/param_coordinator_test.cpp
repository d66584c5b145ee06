// The parameter coordinator over each parameter tier, one rank: gathered values are the tier's
// shards in the storage type, release follows persistence / reuse distance / max_live_parameters,
// and a step that departs from the recorded module order is followed by a new recording, never
// a hang or an assert.
#include "engine/zero/param_coordinator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "cpu_adam/half.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/memory/stream_ordered_memory.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "gpu/process_group.h"
#include "gpu/stream.h"
#include "tests/engine/test_world.h"
#include "tests/gpu/device_test_util.h"

namespace strata::engine::zero {
namespace {

using ::testing::HasSubstr;

// Four modules of 3000, 5000, 100 and 7000 elements (one tensor each).
std::vector<std::vector<ParamSpec>> modules() {
  return {{ParamSpec{"m0", {3000}}},
          {ParamSpec{"m1", {5000}}},
          {ParamSpec{"m2", {100}}},
          {ParamSpec{"m3", {7000}}}};
}

// The ranges the tier is filled in: 2 x the shard alignment, so most modules take several.
constexpr std::int64_t kRange = 2 * FlatLayout::kDefaultShardAlignment;

struct Fixture {
  Fixture(OffloadDevice device, CoordinatorOptions options, aio::FaultPlan faults = {},
          const std::vector<std::vector<ParamSpec>>& specs = modules(),
          std::int64_t device_budget_bytes = 0)
      : device_(gpu::create_host_device({.memory_budget_bytes = device_budget_bytes})),
        ops(gpu::create_ops(*device_)),
        comm(gpu::create_comm(engine::testing::test_world(), *device_)),
        layout(specs, 1),
        memory(*device_) {
    // Every element's bf16 value is its index modulo 256, exactly representable.
    std::vector<std::byte> shards(static_cast<std::size_t>(layout.partition_numel() * 2));
    auto* bits = reinterpret_cast<std::uint16_t*>(shards.data());
    for (std::int64_t i = 0; i < layout.partition_numel(); ++i)
      bits[i] = cpu_adam::to_bf16(static_cast<float>(i % 256)).bits;
    ParamTierOptions tier_options;
    tier_options.device = device;
    tier_options.element_bytes = 2;
    tier_options.max_in_cpu = 0;
    tier_options.buffer_count = 3;
    tier_options.buffer_size = 1 << 20;
    tier_options.nvme.nvme_path = ::testing::TempDir();
    // ctest runs test cases in parallel: each gets its own swap directory.
    tier_options.nvme.job_name = std::string("coordinator-") +
                                 ::testing::UnitTest::GetInstance()->current_test_info()->name();
    tier_options.nvme.faults = std::move(faults);
    make_tier(tier_options);
    // Written through the sink in sub-group sized ranges, which cut modules in pieces.
    for (std::int64_t begin = 0; begin < layout.partition_numel(); begin += kRange) {
      const Range range{begin, std::min(begin + kRange, layout.partition_numel())};
      std::span<std::byte> values = tier->values(range);
      std::memcpy(values.data(), shards.data() + begin * 2, values.size());
      tier->commit(range);
    }
    std::vector<std::string> names;
    for (const std::vector<ParamSpec>& module : specs)
      names.push_back(module.front().name);
    coordinator = std::make_unique<ParamCoordinator>(*ops, *comm, device_->compute_stream(), layout,
                                                     *tier, memory, names, options);
  }
  ~Fixture() {
    device_->synchronize();
    coordinator.reset();
    memory.drain();
  }

  // The tier with its memory as the engine plans it: shelves in a pool, partitions in a book,
  // extents in a store; the pool opens once the tier has reserved, the store's rings register its
  // page-locked arena, then the tier takes its CPU memory.
  void make_tier(const ParamTierOptions& planned) {
    ParamTierOptions options = planned;
    if (options.device != OffloadDevice::none) {
      pool = std::make_unique<memory::PinnedPool>(*device_);
      options.pool = pool.get();
      options.book = &book;
    }
    if (options.device == OffloadDevice::nvme) {
      store = std::make_unique<memory::NvmeStore>(options.nvme);
      options.store = store.get();
    }
    tier = std::make_unique<ParamTier>(*device_, layout, options);
    if (!pool) return;
    pool->open();
    if (store) store->open(pool->pinned_arena());
    tier->open();
  }

  // Module `m` is gathered in the storage type (bf16), and its values match its shard.
  void expect_values(int m) {
    std::span<const gpu::Tensor> tensors = coordinator->acquire(m);
    device_->compute_stream().synchronize();
    ASSERT_EQ(tensors[0].type, gpu::DataType::bfloat16);
    const auto* values = static_cast<const cpu_adam::bf16*>(tensors[0].data);
    const ModuleSlice& slice = layout.module(m);
    for (std::int64_t i = 0; i < layout.tensors(m)[0].numel; ++i)
      ASSERT_EQ(cpu_adam::to_float(values[i]),
                static_cast<float>((slice.partition_offset + i) % 256))
          << "module " << m << " element " << i;
    coordinator->release(m);
  }

  std::unique_ptr<gpu::Device> device_;
  std::unique_ptr<gpu::Ops> ops;
  std::unique_ptr<gpu::Comm> comm;
  FlatLayout layout;
  memory::StreamOrderedMemory memory;
  // Before the tier: they outlive it.
  memory::Residency book;
  std::unique_ptr<memory::PinnedPool> pool;
  std::unique_ptr<memory::NvmeStore> store;
  std::unique_ptr<ParamTier> tier;
  std::unique_ptr<ParamCoordinator> coordinator;
};

CoordinatorOptions stage3() {
  CoordinatorOptions options;
  options.release_after_use = true;
  options.storage = gpu::DataType::bfloat16;
  options.persistence_threshold = 0;
  options.max_reuse_distance = 0;
  options.prefetch_bucket_size = 1 << 20;
  options.max_live_parameters = std::numeric_limits<std::int64_t>::max();
  return options;
}

TEST(ParamCoordinator, GathersTheTierShardsInTheStorageTypeOnEveryTier) {
  for (OffloadDevice device : {OffloadDevice::none, OffloadDevice::cpu, OffloadDevice::nvme}) {
    SCOPED_TRACE(to_string(device));
    Fixture f(device, stage3());
    for (int step = 0; step < 2; ++step) {
      f.coordinator->begin_pass(true);
      for (int m : {0, 1, 2, 3, 3, 2, 1, 0})
        f.expect_values(m);
      f.coordinator->end_step();
    }
    EXPECT_EQ(f.coordinator->counters().live_elements, 0);
  }
}

// The device tier of one rank holds every whole module in the storage type: the coordinator lends
// it in place, at stage 3 as below it. The tensors point into the tier's partition, no step memory
// is taken and nothing is copied, and new values the tier takes are what the next pass reads.
TEST(ParamCoordinator, TheDeviceTierOfOneRankIsReadInPlace) {
  for (bool release_after_use : {true, false}) {
    SCOPED_TRACE(release_after_use ? "stage 3" : "stages 0-2");
    CoordinatorOptions options = stage3();
    options.release_after_use = release_after_use;
    Fixture f(OffloadDevice::none, options);
    ASSERT_TRUE(f.tier->lends());
    const std::int64_t live_before = f.memory.live_bytes();
    f.coordinator->begin_pass(true);
    for (int m : {0, 1, 2, 3, 3, 2, 1, 0}) {
      std::span<const gpu::Tensor> tensors = f.coordinator->acquire(m);
      EXPECT_EQ(tensors[0].data,
                f.tier->device_partition() + f.layout.module(m).partition_offset * 2);
      EXPECT_EQ(f.memory.live_bytes(), live_before);
      f.coordinator->release(m);
      f.expect_values(m);
    }
    f.coordinator->end_step();
    EXPECT_EQ(f.coordinator->counters().lent, f.coordinator->counters().gathers);
    // A new value committed to the tier (an offloaded optimizer's) is read by the next pass.
    f.coordinator->invalidate();
    std::span<std::byte> values = f.tier->values(Range{0, kRange});
    std::ranges::fill(values, std::byte{0});
    f.tier->commit(Range{0, kRange});
    std::span<const gpu::Tensor> tensors = f.coordinator->acquire(0);
    std::uint16_t first = 1;
    f.device_->compute_stream().copy(&first, tensors[0].data, 2, gpu::CopyKind::device_to_host);
    f.device_->compute_stream().synchronize();
    EXPECT_EQ(first, 0);
    f.coordinator->release(0);
  }
  // Sharded over ranks, or offloaded, the tier has a shard of each module at most: gathered.
  Fixture cpu(OffloadDevice::cpu, stage3());
  EXPECT_FALSE(cpu.tier->lends());
}

// Six modules of one size: the host enqueues a whole forward and backward without waiting for
// the device (each gathered buffer is one released before, reused in stream order; each NVMe
// shard's pool buffer goes back once its copy has run), and every module still sees its own
// values, those whose shards went up ahead of use (cpu) among them.
TEST(ParamCoordinator, APassOfRepeatedModulesRunsAheadOfTheDeviceWithTheRightValues) {
  std::vector<std::vector<ParamSpec>> specs;
  for (int m = 0; m < 6; ++m)
    specs.push_back({ParamSpec{"block" + std::to_string(m), {5000}}});
  for (OffloadDevice device : {OffloadDevice::cpu, OffloadDevice::nvme}) {
    SCOPED_TRACE(to_string(device));
    Fixture f(device, stage3(), {}, specs);
    const std::vector<int> order = {0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0};
    std::vector<std::vector<cpu_adam::bf16>> seen(order.size(), std::vector<cpu_adam::bf16>(5000));
    std::int64_t fresh_after_second = 0;
    for (int step = 0; step < 3; ++step) {
      f.coordinator->begin_pass(true);
      for (std::size_t i = 0; i < order.size(); ++i) {
        const int m = order[i];
        std::span<const gpu::Tensor> tensors = f.coordinator->acquire(m);
        f.device_->compute_stream().copy(seen[i].data(), tensors[0].data, 5000 * 2,
                                         gpu::CopyKind::device_to_host);
        f.coordinator->release(m);
      }
      f.coordinator->end_step();
      f.device_->compute_stream().synchronize();
      if (step == 1) fresh_after_second = f.memory.fresh_allocations();
      for (std::size_t i = 0; i < order.size(); ++i) {
        const ModuleSlice& slice = f.layout.module(order[i]);
        for (std::int64_t e = 0; e < 5000; e += 499)
          ASSERT_EQ(cpu_adam::to_float(seen[i][static_cast<std::size_t>(e)]),
                    static_cast<float>((slice.partition_offset + e) % 256))
              << "step " << step << " use " << i << " (module " << order[i] << ") element " << e;
      }
    }
    // With room in the budget, no allocation waited for the device, and once the trace is
    // followed (the second pass: with modules gathered ahead, more are live at once than on the
    // recording pass) a pass takes no fresh memory: every buffer is one the last released.
    EXPECT_EQ(f.memory.waits(), 0);
    EXPECT_GT(fresh_after_second, 0);
    EXPECT_EQ(f.memory.fresh_allocations(), fresh_after_second);
  }
}

// On a followed trace, shards in CPU memory go up ahead of use: acquiring a module gathers the
// next ones in the trace (stage3_prefetch_bucket_size elements) by copies on the copy stream that
// run while the compute stream is still held, and the compute stream waits for each only when
// its module is acquired. A module on NVMe is only read ahead (into the tier's buffers).
TEST(ParamCoordinator, ShardsInCpuMemoryGoUpAheadOfUseAlongTheTrace) {
  std::vector<std::vector<ParamSpec>> specs;
  for (int m = 0; m < 4; ++m)
    specs.push_back({ParamSpec{"block" + std::to_string(m), {4096}}});
  CoordinatorOptions options = stage3();
  options.prefetch_bucket_size = 4096;  // one module ahead
  for (OffloadDevice device : {OffloadDevice::cpu, OffloadDevice::nvme}) {
    SCOPED_TRACE(to_string(device));
    Fixture f(device, options, {}, specs);
    const std::vector<int> order = {0, 1, 2, 3, 3, 2, 1, 0};
    for (int step = 0; step < 2; ++step) {
      f.coordinator->begin_pass(true);
      for (std::size_t i = 0; i < order.size(); ++i) {
        const std::int64_t gathers = f.coordinator->counters().gathers;
        gpu::testing::Gate gate;
        if (step == 1 && i == 0) f.device_->compute_stream().launch(gate.waiter());
        std::span<const gpu::Tensor> tensors = f.coordinator->acquire(order[i]);
        const std::int64_t gathered = f.coordinator->counters().gathers - gathers;
        if (step == 1 && i == 0) {
          // The trace's next module went up too, and its copy runs with compute held.
          EXPECT_EQ(gathered, device == OffloadDevice::cpu ? 2 : 1);
          f.device_->h2d_stream().synchronize();
          if (device == OffloadDevice::cpu) {
            EXPECT_EQ(f.coordinator->counters().live_elements, 2 * 4096);
          }
          gate.open();
        }
        if (step == 1 && i > 0 && i + 1 < order.size() && order[i] != order[i - 1] &&
            device == OffloadDevice::cpu) {
          // Gathered one acquire before: only the one after it is new.
          EXPECT_LE(gathered, 1) << "use " << i;
        }
        std::vector<cpu_adam::bf16> seen(4096);
        f.device_->compute_stream().copy(seen.data(), tensors[0].data, 4096 * 2,
                                         gpu::CopyKind::device_to_host);
        f.device_->compute_stream().synchronize();
        const ModuleSlice& slice = f.layout.module(order[i]);
        for (std::int64_t e = 0; e < 4096; e += 257)
          ASSERT_EQ(cpu_adam::to_float(seen[static_cast<std::size_t>(e)]),
                    static_cast<float>((slice.partition_offset + e) % 256))
              << "step " << step << " use " << i << " element " << e;
        f.coordinator->release(order[i]);
      }
      f.coordinator->end_step();
    }
    f.coordinator->invalidate();
    EXPECT_EQ(f.coordinator->counters().live_elements, 0);
  }
}

// A shard read from NVMe is handed to the copy stream and the host goes on: fetch does not wait
// for the copy to run. Fetched again before it has, the shard is copied from the buffer it is
// still in, without a second read.
TEST(ParamTier, FetchFromNvmeDoesNotWaitForTheCopy) {
  Fixture f(OffloadDevice::nvme, stage3());
  gpu::testing::Gate gate;
  f.device_->h2d_stream().launch(gate.waiter());
  const std::int64_t shard = f.layout.module(1).shard_numel;
  gpu::DeviceBuffer forward = f.device_->allocate(shard * 2, "forward");
  gpu::DeviceBuffer backward = f.device_->allocate(shard * 2, "backward");
  std::int64_t read = 0;
  auto fetched = std::async(std::launch::async, [&] {
    f.tier->fetch(1, f.device_->compute_stream(), forward.data());
    read = f.tier->nvme_read_bytes();
    f.tier->fetch(1, f.device_->compute_stream(), backward.data());
  });
  ASSERT_EQ(fetched.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  fetched.get();
  EXPECT_GT(read, 0);
  EXPECT_EQ(f.tier->nvme_read_bytes(), read);
  gate.open();
  f.device_->compute_stream().synchronize();
  const std::int64_t first = f.layout.module(1).partition_offset;
  for (const gpu::DeviceBuffer* target : {&forward, &backward}) {
    const auto* bits = target->as<const std::uint16_t>();
    for (std::int64_t e = 0; e < shard; e += 101)
      ASSERT_EQ(bits[e], cpu_adam::to_bf16(static_cast<float>((first + e) % 256)).bits) << e;
  }
}

// A copy that waited on failed work (the compute stream's release of its target) fails with it:
// the failure comes out of the tier as it is, the tier stays consistent (its shards on NVMe are
// intact), and once the copy stream's error is taken the shard is fetched again.
TEST(ParamTier, ACopyFailingWithTheWorkItWaitedForLeavesTheShardsIntact) {
  Fixture f(OffloadDevice::nvme, stage3());
  gpu::Stream& compute = f.device_->compute_stream();
  const std::int64_t shard = f.layout.module(1).shard_numel;
  gpu::DeviceBuffer target = f.device_->allocate(shard * 2, "target");
  compute.launch([] { throw std::runtime_error("a kernel failed"); });
  std::unique_ptr<gpu::Event> released = f.device_->create_event();
  compute.record(*released);
  f.tier->fetch(1, compute, target.data(), released.get());
  EXPECT_THROW(compute.synchronize(), std::runtime_error);
  EXPECT_THROW(f.tier->fetch(1, compute, target.data()), std::runtime_error);
  EXPECT_FALSE(f.tier->inconsistent());
  EXPECT_THROW(f.device_->h2d_stream().synchronize(), std::runtime_error);
  f.tier->fetch(1, compute, target.data());
  compute.synchronize();
  const auto* bits = target.as<const std::uint16_t>();
  const std::int64_t first = f.layout.module(1).partition_offset;
  for (std::int64_t e = 0; e < shard; e += 101)
    ASSERT_EQ(bits[e], cpu_adam::to_bf16(static_cast<float>((first + e) % 256)).bits) << e;
}

// The device tier takes new parameters (an offloaded optimizer's sub-groups) through two staging
// slots: a commit enqueues the upload and returns, so two commits pass while the copy stream is
// held, and the values arrive once it runs.
TEST(ParamTier, DeviceTierCommitsDoNotWaitForTheirUploads) {
  Fixture f(OffloadDevice::none, stage3());
  gpu::testing::Gate gate;
  f.device_->h2d_stream().launch(gate.waiter());
  const Range first{0, kRange};
  const Range second{kRange, 2 * kRange};
  auto committed = std::async(std::launch::async, [&] {
    for (const Range& range : {first, second}) {
      std::span<std::byte> values = f.tier->values(range);
      auto* bits = reinterpret_cast<std::uint16_t*>(values.data());
      for (std::int64_t i = 0; i < range.size(); ++i)
        bits[i] = cpu_adam::to_bf16(static_cast<float>(range.begin / kRange + 7)).bits;
      f.tier->commit(range);
    }
  });
  ASSERT_EQ(committed.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  committed.get();
  gate.open();
  f.device_->compute_stream().synchronize();
  const auto* shards = reinterpret_cast<const std::uint16_t*>(f.tier->device_partition());
  for (std::int64_t i = 0; i < 2 * kRange; i += 97)
    ASSERT_EQ(shards[i], cpu_adam::to_bf16(static_cast<float>(i / kRange + 7)).bits) << i;
}

// Writes range `range` of the tier with element i's value (i % 256) + 1 (the fixture's plus one).
void commit_new_values(ParamTier& tier, Range range) {
  std::span<std::byte> values = tier.values(range);
  auto* bits = reinterpret_cast<std::uint16_t*>(values.data());
  for (std::int64_t i = 0; i < range.size(); ++i)
    bits[i] = cpu_adam::to_bf16(static_cast<float>((range.begin + i) % 256 + 1)).bits;
  tier.commit(range);
}

// Waits, up to a deadline, until a reader is waiting in wait_committed.
bool reader_waits(const ParamTier& tier) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (tier.commit_waits() == 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// The last sub-groups of a step are committed by the optimizer's thread while the next forward
// gathers (engine/zero/overlapped_step.h): a module whose shard an expected range covers is
// gathered only once that range is committed, with the new values (on the device tier, once its
// upload has run, which the stream waits for), and a module no expected range covers is gathered
// at once. An NVMe prefetch of a covered module is refused until then.
TEST(ParamCoordinator, AModuleWaitsForTheExpectedRangesItOverlapsAndNoOther) {
  for (OffloadDevice device : {OffloadDevice::none, OffloadDevice::cpu, OffloadDevice::nvme}) {
    SCOPED_TRACE(to_string(device));
    Fixture f(device, stage3());
    // Module 0 is elements [0, 3000): the range [0, kRange) covers it, and module 3 is beyond.
    const Range covering{0, kRange};
    ASSERT_LE(f.layout.module(0).shard_numel, kRange);
    f.tier->expect(covering);
    f.coordinator->begin_pass(true);
    if (device == OffloadDevice::nvme) {
      EXPECT_FALSE(f.tier->prefetch(0));
    }
    f.expect_values(3);
    EXPECT_EQ(f.tier->commit_waits(), 0);

    // The copy stream is held until the reader has enqueued its copy of module 0: the device
    // tier's commit uploads behind it, and the compute stream must wait for that upload.
    gpu::testing::Gate uploads;
    std::promise<void> enqueued;
    auto gathered = std::async(std::launch::async, [&] {
      std::span<const gpu::Tensor> tensors = f.coordinator->acquire(0);
      enqueued.set_value();
      f.device_->compute_stream().synchronize();
      std::vector<float> values;
      const auto* bits = static_cast<const cpu_adam::bf16*>(tensors[0].data);
      for (std::int64_t i = 0; i < f.layout.tensors(0)[0].numel; ++i)
        values.push_back(cpu_adam::to_float(bits[i]));
      f.coordinator->release(0);
      return values;
    });
    EXPECT_TRUE(reader_waits(*f.tier)) << "module 0 was gathered before its range was committed";
    f.device_->h2d_stream().launch(uploads.waiter());
    commit_new_values(*f.tier, covering);
    EXPECT_EQ(enqueued.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
    EXPECT_EQ(f.tier->upload_waits(), device == OffloadDevice::none ? 1 : 0);
    uploads.open();
    ASSERT_EQ(gathered.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    const std::vector<float> values = gathered.get();
    for (std::size_t i = 0; i < values.size(); ++i)
      ASSERT_EQ(values[i], static_cast<float>(i % 256 + 1)) << "element " << i;
    if (device == OffloadDevice::nvme) {
      EXPECT_TRUE(f.tier->prefetch(0));
    }
  }
}

// When the optimizer's thread fails, the modules waiting for its ranges fail with its error and
// its fix, rather than wait for ever or read the last step's values.
TEST(ParamCoordinator, AForgoneRangeFailsItsReaderWithTheCauseAndItsFix) {
  Fixture f(OffloadDevice::cpu, stage3());
  f.tier->expect(Range{0, kRange});
  f.coordinator->begin_pass(true);
  auto gathered = std::async(std::launch::async, [&] { f.coordinator->acquire(0); });
  EXPECT_TRUE(reader_waits(*f.tier));
  f.tier->forgo_expected("writing the swap file failed", "free space on the disk");
  try {
    gathered.get();
    FAIL() << "the gather of a forgone range returned";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("writing the swap file failed"));
    EXPECT_THAT(error.fix(), HasSubstr("free space on the disk"));
  }
}

TEST(ParamCoordinator, ADepartureFromTheTraceIsRecordedAgain) {
  Fixture f(OffloadDevice::nvme, stage3());
  auto pass = [&](std::initializer_list<int> order) {
    f.coordinator->begin_pass(true);
    for (int m : order)
      f.expect_values(m);
    f.coordinator->end_step();
  };
  pass({0, 1, 2, 3, 3, 2, 1, 0});  // recorded
  pass({0, 1, 2, 3, 3, 2, 1, 0});  // followed with prefetch
  EXPECT_EQ(f.coordinator->counters().trace_recordings, 1);
  pass({0, 2, 1, 3, 3, 1, 2, 0});  // departs: values still right, no prefetch
  pass({0, 2, 1, 3, 3, 1, 2, 0});  // recorded anew
  pass({0, 2, 1, 3, 3, 1, 2, 0});  // followed
  EXPECT_EQ(f.coordinator->counters().trace_recordings, 2);
  // An evaluation pass in yet another order neither follows nor disturbs the trace.
  f.coordinator->begin_pass(false);
  for (int m : {3, 0})
    f.expect_values(m);
  pass({0, 2, 1, 3, 3, 1, 2, 0});
  EXPECT_EQ(f.coordinator->counters().trace_recordings, 2);
}

TEST(ParamCoordinator, PersistentAndSoonReusedModulesStayGathered) {
  CoordinatorOptions options = stage3();
  options.persistence_threshold = 1000;  // m2 (100 elements) is persistent
  options.max_reuse_distance = 6000;     // m3 is used again at once, m1 after 12000 elements
  Fixture f(OffloadDevice::cpu, options);
  for (int step = 0; step < 2; ++step) {
    f.coordinator->begin_pass(true);
    for (int m : {0, 1, 2, 3, 3, 2, 1, 0})
      f.expect_values(m);
    f.coordinator->end_step();
  }
  // After the last use of every module only the persistent one is left; on the followed step
  // m3 was kept between its two uses, so it was gathered once there instead of twice.
  EXPECT_EQ(f.coordinator->counters().live_elements, f.layout.module(2).padded_numel);
  const CoordinatorCounters counters = f.coordinator->counters();
  // Step 1 (recording): 7 gathers (m2 once); step 2: m0, m1, m3, m1, m0 = 5.
  EXPECT_EQ(counters.gathers, 12);
}

TEST(ParamCoordinator, MaxLiveParametersBoundsWhatIsKept) {
  CoordinatorOptions options = stage3();
  options.max_reuse_distance = std::numeric_limits<std::int64_t>::max();  // keep everything...
  options.max_live_parameters = 12'288;  // ...but at most this many gathered elements
  Fixture f(OffloadDevice::cpu, options);
  f.coordinator->begin_pass(true);
  f.coordinator->end_step();
  for (int step = 0; step < 3; ++step) {
    f.coordinator->begin_pass(true);
    for (int m : {0, 1, 2, 3, 3, 2, 1, 0})
      f.expect_values(m);
    f.coordinator->end_step();
    EXPECT_LE(f.coordinator->counters().peak_live_elements, options.max_live_parameters);
  }
}

// Modules kept for reuse are a cache: a budget with room for the modules in use but not for
// every kept one drops kept ones (needed again last first) instead of failing the gather.
TEST(ParamCoordinator, KeptModulesMakeRoomWhenTheBudgetHasNone) {
  CoordinatorOptions options = stage3();
  options.max_reuse_distance = std::numeric_limits<std::int64_t>::max();  // keep everything
  const FlatLayout layout(modules(), 1);
  std::int64_t elements = 0;
  for (int m = 0; m < layout.module_count(); ++m)
    elements += layout.module(m).padded_numel;
  // Room for three quarters of the modules (gathered in bf16, 2 bytes an element), not all four.
  Fixture f(OffloadDevice::cpu, options, {}, modules(), elements * 2 * 3 / 4);
  for (int step = 0; step < 3; ++step) {
    f.coordinator->begin_pass(true);
    for (int m : {0, 1, 2, 3, 3, 2, 1, 0})
      f.expect_values(m);
    f.coordinator->end_step();
  }
  const CoordinatorCounters counters = f.coordinator->counters();
  // Recording: 8 gathers; each followed step keeps m3 between its uses but must gather again
  // some module it had to drop.
  EXPECT_GT(counters.gathers, 8 + 2 * 4);
}

TEST(ParamCoordinator, InvalidateDropsEveryGatheredCopy) {
  CoordinatorOptions options = stage3();
  options.release_after_use = false;  // stages 0-2: everything stays gathered
  Fixture f(OffloadDevice::none, options);
  f.coordinator->begin_pass(true);
  for (int m : {0, 1, 2, 3})
    f.expect_values(m);
  f.coordinator->end_step();
  EXPECT_GT(f.coordinator->counters().live_elements, 0);
  f.coordinator->invalidate();
  EXPECT_EQ(f.coordinator->counters().live_elements, 0);
}

// A corrupted read of a parameter shard stops the step with the checksum error and leaves the
// tier refusing every later use: training cannot go on silently from parameters it lost.
TEST(ParamCoordinator, AFailedShardReadMakesTheTierInconsistent) {
  // Completions 0-5 are the first writes (ranges of 4096 elements: m0; m1's first part; m1's
  // second and m2; m3 in two parts); 6 is the first read.
  Fixture f(OffloadDevice::nvme, stage3(), aio::FaultPlan(7).flip_bit(6));
  f.coordinator->begin_pass(true);
  try {
    f.coordinator->acquire(0);
    FAIL() << "expected a UserError";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("checksum"));
    EXPECT_THAT(error.what(), HasSubstr("inconsistent"));
    EXPECT_THAT(error.fix(), HasSubstr("do not trust this file"));
    EXPECT_THAT(error.fix(), HasSubstr("training cannot continue from this state"));
  }
  try {
    f.coordinator->acquire(1);
    FAIL() << "expected a UserError";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("inconsistent since an earlier transfer failed"));
  }
}

}  // namespace
}  // namespace strata::engine::zero

// GradReducer::plan (engine/zero/grad_reducer_plan.h) is what a reducer holds: the device memory,
// the pool's shelves, the swap file and the page-locked norm buffers it takes at construction are
// the plan's, for the gradients on the device, in CPU memory and on NVMe.
#include "engine/zero/grad_reducer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "base/round_up.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/memory/stream_ordered_memory.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "gpu/process_group.h"
#include "tests/engine/test_world.h"

namespace strata::engine::zero {
namespace {

struct Placement {
  const char* name;
  int stage;
  bool to_host;
  bool to_nvme;
  bool bf16;
};

constexpr Placement kPlacements[] = {
    {"device, stage 3", 3, false, false, false}, {"device, stage 1", 1, false, false, false},
    {"cpu, stage 3", 3, true, false, false},     {"cpu, stage 1, bf16", 1, true, false, true},
    {"nvme, stage 3", 3, true, true, false},     {"nvme, stage 3, bf16", 3, true, true, true},
};

std::vector<std::vector<ParamSpec>> three_modules() {
  return {{ParamSpec{"w0", {3000}}},
          {ParamSpec{"w1", {5000}}, ParamSpec{"b1", {17}}},
          {ParamSpec{"w2", {1000}}}};
}

TEST(GradReducerPlan, IsWhatTheReducerHolds) {
  int index = 0;
  for (const Placement& placement : kPlacements) {
    SCOPED_TRACE(placement.name);
    ++index;
    std::unique_ptr<gpu::Device> device = gpu::create_host_device({});
    std::unique_ptr<gpu::Ops> ops = gpu::create_ops(*device);
    std::unique_ptr<gpu::Comm> comm = gpu::create_comm(testing::test_world(), *device);
    const FlatLayout layout(three_modules(), 1);
    memory::StreamOrderedMemory memory(*device);
    memory::NvmeStoreOptions store_options;
    store_options.nvme_path = ::testing::TempDir();
    store_options.job_name = fmt::format("reducer-plan-{}", index);
    memory::NvmeStore store(store_options);
    memory::PinnedPool pool(*device);
    memory::Residency book;
    GradReducerOptions options;
    options.stage = placement.stage;
    options.to_host = placement.to_host;
    options.to_nvme = placement.to_nvme;
    options.bf16 = placement.bf16;
    options.store = &store;
    options.pool = &pool;
    options.book = &book;
    options.largest_read = placement.to_nvme ? 4096 : 0;
    const GradReducerPlan plan = GradReducer::plan(options, layout);

    const std::int64_t device_before = device->bytes_in_use();
    const std::int64_t pinned_before = device->pinned_bytes_in_use();
    {
      GradReducer reducer(*device, *ops, *comm, device->compute_stream(), layout, memory,
                          {"m0", "m1", "m2"}, options);
      EXPECT_EQ(device->bytes_in_use() - device_before,
                plan.device_partition_bytes + plan.full_buffer_bytes + plan.norm_bytes +
                    plan.module_norm_bytes);
      EXPECT_EQ(device->pinned_bytes_in_use() - pinned_before,
                base::round_up(plan.pinned_norm_bytes, 4096) +
                    base::round_up(plan.pinned_module_norm_bytes, 4096));
      EXPECT_EQ(pool.shelf_count(), placement.to_host ? (placement.to_nvme ? 2 : 1) : 0);
      if (placement.to_host) {
        EXPECT_EQ(pool.buffer_size_bytes(0), plan.host_bytes());
      }
      if (placement.to_nvme) {
        EXPECT_EQ(pool.buffer_size_bytes(1), plan.read_bytes);
      }
      EXPECT_EQ(reducer.nvme_bytes(), plan.swap_bytes);
    }
    // The partition is where the plan puts it, in the gradients' type.
    const std::int64_t grad_bytes = placement.bf16 ? 2 : 4;
    const std::int64_t part = layout.partition_numel();
    EXPECT_EQ(plan.device_partition_bytes, placement.to_host ? 0 : 4 * part);
    EXPECT_EQ(
        plan.accumulation_bytes,
        placement.to_host ? (placement.to_nvme ? 2 * plan.piece_elements : part) * grad_bytes : 0);
    EXPECT_EQ(plan.full_buffer_bytes, placement.stage <= 1 ? 4 * (4096 + 6144 + 2048) : 0);
  }
}

}  // namespace
}  // namespace strata::engine::zero

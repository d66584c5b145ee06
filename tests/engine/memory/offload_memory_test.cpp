// The rank's offload memory as the engine builds it: one pool, with a shelf per use, for the
// parameter tier, the offloaded optimizer and the gradient reducer; one residency book holding all
// their partitions; and swap stores whose rings register that pool's page-locked memory.
#include <fmt/format.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/engine.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "gpu/comm.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "models/gpt/gpt.h"
#include "tests/engine/swap_directory.h"
#include "tests/engine/test_world.h"

namespace strata::engine {
namespace {

using testing::SwapDirectory;

// A tiny GPT at stage 3 whose zero_optimization offload sections are `offload`.
Config offload_config(const std::string& offload) {
  const std::string text = R"({
    "train_micro_batch_size_per_gpu": 2,
    "bf16": {"enabled": true},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": 3, "sub_group_size": 20000, )" +
                           offload + R"(},
    "strata": {"model": {"n_layer": 2, "n_head": 2, "d_model": 64, "seq_len": 16, "vocab": 256},
               "seed": 7}})";
  return parse_config_text(text, "offload memory config").config;
}

// An engine over the tiny GPT on the host device, trained one step.
struct TrainedEngine {
  explicit TrainedEngine(const Config& config)
      : device(gpu::create_host_device({})),
        ops(gpu::create_ops(*device)),
        comm(gpu::create_comm(testing::test_world(), *device)),
        model({config.strata.model.n_layer, config.strata.model.n_head, config.strata.model.d_model,
               config.strata.model.seq_len, config.strata.model.vocab,
               config.batch.train_micro_batch_size_per_gpu}),
        runtime{*device, *ops, *comm},
        engine(runtime, config, model) {
    const std::int64_t tokens = model.tokens_per_micro_batch();
    std::vector<std::int32_t> inputs(static_cast<std::size_t>(tokens));
    std::vector<std::int32_t> targets(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      inputs[i] = static_cast<std::int32_t>(i * 7 % 256);
      targets[i] = static_cast<std::int32_t>((i * 7 + 1) % 256);
    }
    loss = engine.train_batch(inputs, targets).loss;
  }

  std::unique_ptr<gpu::Device> device;
  std::unique_ptr<gpu::Ops> ops;
  std::unique_ptr<gpu::Comm> comm;
  models::Gpt model;
  Runtime runtime;
  Engine engine;
  double loss = 0;
};

std::vector<std::string> shelf_names(const memory::PinnedPool& pool) {
  std::vector<std::string> names;
  for (int shelf = 0; shelf < pool.shelf_count(); ++shelf)
    names.push_back(pool.what(shelf));
  return names;
}

// How many partitions of the book each user holds, by the user's name.
std::map<std::string, int> partitions_by_user(const memory::Residency& book) {
  std::map<std::string, int> count;
  for (memory::PartitionId id = 0; id < book.partition_count(); ++id)
    ++count[book.user_name(book.user(id))];
  return count;
}

bool same_memory(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.data() == b.data() && a.size() == b.size();
}

// Optimizer states in CPU memory, parameters on NVMe: the tier's read buffers, the optimizer's
// states and the gradient partition are shelves of one pool, every partition of the three is in
// one book, and the rank's one store registers that pool's page-locked arena.
TEST(OffloadMemory, OneArenaAndOneBookServeTheTierTheOptimizerAndTheReducer) {
  SwapDirectory swap;
  const TrainedEngine run(offload_config(R"("stage3_param_persistence_threshold": 0,
      "offload_param": {"device": "nvme", "nvme_path": ")" +
                                         swap.string() + R"(", "max_in_cpu": 0},
      "offload_optimizer": {"device": "cpu"})"));
  EXPECT_TRUE(std::isfinite(run.loss));

  const memory::PinnedPool* pool = run.engine.host_pool();
  ASSERT_NE(pool, nullptr);
  const std::vector<std::string> shelves = shelf_names(*pool);
  EXPECT_EQ(shelves,
            (std::vector<std::string>{"parameter swap buffers", "optimizer states in CPU memory",
                                      "gradient partition in CPU memory"}));
  EXPECT_FALSE(pool->resident(0));
  EXPECT_TRUE(pool->resident(1));
  EXPECT_TRUE(pool->resident(2));

  const memory::Residency& book = run.engine.residency();
  const zero::FlatLayout& layout = run.engine.layout();
  const std::map<std::string, int> partitions = partitions_by_user(book);
  EXPECT_EQ(book.user_count(), 3);
  EXPECT_EQ(partitions.at("parameter shards"), layout.module_count());
  EXPECT_GE(partitions.at("optimizer states"), 2);  // sub_group_size cuts the partition
  EXPECT_EQ(partitions.at("gradients"), 1);

  const std::vector<const memory::NvmeStore*> stores = run.engine.swap_stores();
  ASSERT_EQ(stores.size(), 1u);
  EXPECT_TRUE(same_memory(stores[0]->registered(), pool->pinned_arena()));
}

// With both tiers in CPU memory, their shelves are page-locked as their own sections' pin_memory
// says (the parameters' off here, the optimizer's and the gradients' on by default), and no store
// is made.
TEST(OffloadMemory, CpuTiersArePinnedAsTheirSectionsSay) {
  const TrainedEngine run(offload_config(R"("offload_param": {"device": "cpu", "pin_memory": false},
      "offload_optimizer": {"device": "cpu"})"));
  EXPECT_TRUE(std::isfinite(run.loss));
  const memory::PinnedPool* pool = run.engine.host_pool();
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(shelf_names(*pool), (std::vector<std::string>{"parameter shards in CPU memory",
                                                          "optimizer states in CPU memory",
                                                          "gradient partition in CPU memory"}));
  EXPECT_FALSE(pool->pinned(0));
  // pin_memory's default, within this test's lock limit.
  EXPECT_TRUE(pool->pinned(1));
  EXPECT_TRUE(pool->pinned(2));
  EXPECT_EQ(pool->swap_buffer_bytes(), 0);
  EXPECT_TRUE(run.engine.swap_stores().empty());
  const std::map<std::string, int> partitions = partitions_by_user(run.engine.residency());
  EXPECT_EQ(partitions.at("parameter shards"), run.engine.layout().module_count());
  EXPECT_EQ(partitions.at("gradients"), 1);
}

// With the parameters on the device and the optimizer in CPU memory, the optimizer's new 16-bit
// parameters go up from two staging buffers of the one pool, page-locked as offload_optimizer's
// pin_memory says: an upload from them is a DMA, where one from pageable memory would be copied
// by the driver on the optimizer's thread.
TEST(OffloadMemory, NewParametersGoUpFromTheOnePoolsPinnedStaging) {
  for (const bool pin : {true, false}) {
    const TrainedEngine run(offload_config(fmt::format(R"("offload_param": {{"device": "none"}},
        "offload_optimizer": {{"device": "cpu", "pin_memory": {}}})",
                                                       pin)));
    EXPECT_TRUE(std::isfinite(run.loss));
    const memory::PinnedPool* pool = run.engine.host_pool();
    ASSERT_NE(pool, nullptr);
    const std::vector<std::string> shelves = shelf_names(*pool);
    const auto staging = static_cast<memory::PinnedPool::Shelf>(
        std::find(shelves.begin(), shelves.end(), "new parameters on their way to the device") -
        shelves.begin());
    ASSERT_LT(staging, pool->shelf_count()) << "pin_memory " << pin;
    EXPECT_EQ(pool->pinned(staging), pin);
    EXPECT_EQ(pool->buffer_count(staging), 2);
    EXPECT_EQ(pool->in_use(staging), 2);  // held for the run
  }
}

// Parameters under another nvme_path than the optimizer's get a second store there, not a second
// pool: its rings register the tier's read buffers inside the one pool's page-locked arena.
TEST(OffloadMemory, ASecondNvmePathRegistersTheOnePoolsMemory) {
  SwapDirectory params_swap;
  SwapDirectory states_swap;
  const TrainedEngine run(offload_config(R"("stage3_param_persistence_threshold": 0,
      "offload_param": {"device": "nvme", "nvme_path": ")" +
                                         params_swap.string() + R"(", "max_in_cpu": 0},
      "offload_optimizer": {"device": "nvme", "nvme_path": ")" +
                                         states_swap.string() + R"("})"));
  EXPECT_TRUE(std::isfinite(run.loss));

  const memory::PinnedPool* pool = run.engine.host_pool();
  ASSERT_NE(pool, nullptr);
  const std::vector<std::string> shelves = shelf_names(*pool);
  const auto tier_shelf = static_cast<memory::PinnedPool::Shelf>(
      std::find(shelves.begin(), shelves.end(), "parameter swap buffers") - shelves.begin());
  ASSERT_LT(tier_shelf, pool->shelf_count());
  EXPECT_EQ(std::set<std::string>(shelves.begin(), shelves.end()),
            (std::set<std::string>{"parameter swap buffers", "optimizer swap buffers",
                                   "gradient swap buffer", "gradient read buffer"}));

  const std::vector<const memory::NvmeStore*> stores = run.engine.swap_stores();
  ASSERT_EQ(stores.size(), 2u);
  EXPECT_NE(stores[0]->directory().string().find(states_swap.string()), std::string::npos);
  EXPECT_NE(stores[1]->directory().string().find(params_swap.string()), std::string::npos);
  EXPECT_TRUE(same_memory(stores[0]->registered(), pool->pinned_arena()));
  ASSERT_TRUE(pool->pinned(tier_shelf));  // pin_memory's default, within this test's lock limit
  const std::span<std::byte> tier_buffers = pool->shelf_memory(tier_shelf);
  EXPECT_TRUE(same_memory(stores[1]->registered(), tier_buffers));
  EXPECT_GE(tier_buffers.data(), pool->pinned_arena().data());
  EXPECT_LE(tier_buffers.data() + tier_buffers.size(),
            pool->pinned_arena().data() + pool->pinned_arena().size());

  // One book: the tier's shards, on the second store, beside the optimizer's sub-groups.
  const std::map<std::string, int> partitions = partitions_by_user(run.engine.residency());
  EXPECT_EQ(partitions.at("parameter shards"), run.engine.layout().module_count());
  EXPECT_GE(partitions.at("optimizer states"), 2);
}

}  // namespace
}  // namespace strata::engine

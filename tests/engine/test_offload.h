#pragma once

#include <memory>
#include <span>

#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/optimizer.h"
#include "engine/zero/optimizer_offload.h"
#include "engine/zero/optimizer_states.h"
#include "gpu/device.h"

namespace strata::engine::zero {

// The memory the engine lends the optimizer states: a pool, on nvme a store opened with
// options.nvme (declared after the pool, whose arena the store's rings register), and a book.
struct TestOffloadMemory {
  TestOffloadMemory(gpu::Device& device, const OptimizerOffloadOptions& options)
      : own_pool(device),
        own_store(options.device == OffloadDevice::nvme
                      ? std::make_unique<memory::NvmeStore>(options.nvme)
                      : nullptr) {}
  // `options` with this memory lent.
  OptimizerOffloadOptions lend(OptimizerOffloadOptions options) {
    options.pool = &own_pool;
    options.book = &own_book;
    options.store = own_store.get();
    return options;
  }

  memory::PinnedPool own_pool;
  std::unique_ptr<memory::NvmeStore> own_store;
  memory::Residency own_book;
};

// The optimizer states and their stepper in memory of their own, opened and filled with the
// fp32 masters `master` and zero moments: one object with both calls, as a test drives them.
class TestOffload : private TestOffloadMemory, public OptimizerStates, public OptimizerOffload {
 public:
  TestOffload(gpu::Device& device, const Optimizer& optimizer, std::span<const float> master,
              const OptimizerOffloadOptions& options)
      : TestOffloadMemory(device, options),
        OptimizerStates(optimizer, static_cast<std::int64_t>(master.size()), lend(options)),
        OptimizerOffload(optimizer, static_cast<OptimizerStates&>(*this), options) {
    own_pool.open();
    if (own_store) own_store->open(own_pool.pinned_arena());
    OptimizerStates::open();
    fill_with_masters(*this, master);
  }
  using OptimizerStates::StatesVisitor;
  using OptimizerStates::SubGroupStates;
};

}  // namespace strata::engine::zero

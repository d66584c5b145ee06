#pragma once

#include <cstdint>
#include <vector>

#include "base/by_index.h"
#include "engine/config/config.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/zero/flat_layout.h"

namespace strata::engine::zero {

struct ParamTierOptions {
  // offload_param.device: none keeps the shards in device memory.
  OffloadDevice device = OffloadDevice::none;
  std::int64_t element_bytes = 2;  // the storage type: 2 (bf16, fp16) or 4 (fp32)
  // offload_param.max_in_cpu: with nvme, modules are kept in CPU memory, in module order, while
  // their shards total at most this many elements; the rest live on NVMe.
  std::int64_t max_in_cpu = 0;
  // offload_param.buffer_count x buffer_size (elements): the pinned buffers NVMe reads land in.
  std::int64_t buffer_count = 5;
  std::int64_t buffer_size = 100'000'000;
  bool pin_memory = false;
  memory::NvmeStoreOptions nvme;  // nvme: where, and the aio settings (the engine's store's)
  // nvme: the store, not yet open, in which the tier reserves its extents (the engine's: the
  // rank's one store, or a second one under offload_param.nvme_path when that is another
  // directory).
  memory::NvmeStore* store = nullptr;
  // cpu, nvme: the rank's pool, not yet open, in which the tier reserves its shelves (the shards
  // it keeps in CPU memory, and with nvme offload_param.buffer_count read buffers); the engine
  // then opens it and calls open().
  memory::PinnedPool* pool = nullptr;
  // cpu, nvme: the rank's residency book, in which the tier registers its shards.
  memory::Residency* book = nullptr;
  // The ranges an offloaded optimizer commits, its sub-groups (empty: an optimizer on the device,
  // a tier only loaded into, or tests). A range that touches a module not in CPU memory passes
  // through staging. The device tier reserves its two staging buffers for the largest in `pool`
  // (a resident shelf), page-locked as `upload_staging_pinned` says (offload_optimizer.
  // pin_memory): from page-locked memory an upload is a DMA that leaves the optimizer's thread
  // free; from pageable memory the driver copies it through a buffer of its own on the calling
  // thread. Without ranges the staging buffers grow to the largest range written.
  std::vector<Range> committed_ranges;
  bool upload_staging_pinned = false;
};

// Which modules' shards a parameter tier on `device` keeps in CPU memory: every one for cpu,
// none for none, and for nvme, in module order, each whose shard still fits with those kept
// before it in `max_in_cpu` elements (offload_param.max_in_cpu); the rest are on NVMe.
base::ByIndex<bool> modules_in_cpu(const FlatLayout& layout, OffloadDevice device,
                                   std::int64_t max_in_cpu);

// The memory a parameter tier holds, from its options and the layout alone (ParamTier::plan): the
// tier reserves and allocates by it, and the memory estimate prints it.
struct ParamTierPlan {
  // A shelf the tier reserves in the pool: `count` buffers of `buffer_bytes` (none when 0).
  struct Shelf {
    std::int64_t count = 0;
    std::int64_t buffer_bytes = 0;
    memory::PinnedPoolOptions options;
    bool reserved() const noexcept { return count > 0; }
  };
  // none: the whole partition in device memory.
  std::int64_t device_bytes = 0;
  // The shards kept in CPU memory, back to back in one resident buffer: the whole partition for
  // cpu, the modules max_in_cpu keeps for nvme. cpu_offset[m]: where module m's shard starts in
  // it (elements), -1 for a module elsewhere.
  Shelf host;
  base::ByIndex<std::int64_t> cpu_offset;
  // nvme: each NVMe-resident module's shard, an extent of the store (nvme_extent[m]: module m's
  // index in `extents`, -1 for a module in CPU memory), and the buffers reads land in, each the
  // size of the largest.
  std::vector<std::int64_t> extents;
  base::ByIndex<int> nvme_extent;
  Shelf swap_buffers;
  // The staging buffers values() hands out for ranges not written in place, each the size of the
  // largest committed range that touches a module not in CPU memory: the device tier's two (one
  // uploading while the next is made) a resident shelf of the pool (`staging_in_pool`), the nvme
  // tier's one grown as the ranges come, outside the pool.
  Shelf staging;
  bool staging_in_pool = false;
};

}  // namespace strata::engine::zero

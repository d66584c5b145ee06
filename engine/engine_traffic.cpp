// What the Engine's step moved and what the engine holds, for StepStats (through StepMeter) and
// MemoryUse.
#include "engine/engine.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/optimizer_step.h"
#include "engine/step_meter.h"
#include "engine/zero/grad_reducer.h"
#include "engine/zero/param_tier.h"

namespace strata::engine {

// Everything moved so far, and of it what the offloaded optimizer moved: its states, the
// gradients it read (GradReducer::optimizer_read_bytes), and the new parameters it committed to
// the tier (to NVMe, or uploaded to the device tier). Loads write the tier too, between steps,
// which count in no step.
TrafficReading Engine::read_traffic() const {
  TrafficReading now;
  now.all = Traffic{runtime_.device.transfer_counters(), nvme_read_bytes(), nvme_write_bytes()};
  const Traffic states = optimizer_->moved();
  now.optimizer.nvme_read = reducer_->optimizer_read_bytes() + states.nvme_read;
  now.optimizer.nvme_write = tier_->nvme_write_bytes() + states.nvme_write;
  now.optimizer.transfers.bytes_h2d = tier_->committed_upload_bytes();
  return now;
}

std::int64_t Engine::nvme_read_bytes() const {
  return tier_->nvme_read_bytes() + reducer_->nvme_read_bytes() + optimizer_->moved().nvme_read;
}

std::int64_t Engine::nvme_write_bytes() const {
  return tier_->nvme_write_bytes() + reducer_->nvme_write_bytes() + optimizer_->moved().nvme_write;
}

// CPU memory the engine holds for the model's states: the parameter tier's, the gradient
// partition, the optimizer's states (all of them in CPU, or its swap buffers with NVMe), and the
// device's page-locked memory.
std::int64_t Engine::host_bytes() const {
  std::int64_t bytes = tier_->unpinned_host_bytes();
  if (pool_) bytes += pool_->unpinned_bytes();
  bytes += optimizer_->host_bytes();
  // Page-locked buffers (pools, the gradient partition, small step buffers) once, as locked.
  return bytes + runtime_.device.pinned_bytes_in_use();
}

MemoryUse Engine::memory_use() const {
  MemoryUse use;
  use.device_peak_bytes = meter_->device_peak();
  use.cpu_bytes = host_bytes();
  use.nvme_bytes = tier_->nvme_bytes() + reducer_->nvme_bytes() + optimizer_->nvme_bytes();
  if (pool_) use.swap_buffer_bytes = pool_->swap_buffer_bytes();
  return use;
}

const memory::PinnedPool* Engine::host_pool() const {
  return pool_.get();
}

const memory::Residency& Engine::residency() const {
  return *book_;
}

std::vector<const memory::NvmeStore*> Engine::swap_stores() const {
  std::vector<const memory::NvmeStore*> stores;
  for (const memory::NvmeStore* store : {swap_.get(), param_swap_.get()})
    if (store != nullptr) stores.push_back(store);
  return stores;
}

}  // namespace strata::engine

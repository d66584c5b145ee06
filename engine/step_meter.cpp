#include "engine/step_meter.h"

#include <algorithm>
#include <utility>

namespace strata::engine {

void StepMeter::begin() {
  started_ = std::chrono::steady_clock::now();
  step_carried_seconds_ = std::exchange(carried_seconds_, 0.0);
  traffic_.begin_step();
  waits_before_ = memory_.waits();
  allocations_before_ = memory_.fresh_allocations();
  device_.reset_peak();
  memory_.reset_peak();
}

void StepMeter::finish(const Traffic& moved, std::int64_t cpu_bytes, StepStats& stats) {
  stats.transfers = moved.transfers;
  stats.bytes_nvme_read = moved.nvme_read;
  stats.bytes_nvme_write = moved.nvme_write;
  stats.allocation_waits = memory_.waits() - waits_before_;
  stats.device_allocations = memory_.fresh_allocations() - allocations_before_;
  // In stream order: the host may hold released buffers a little longer than the device needs
  // them, which a GPU's stream-ordered pool would not (engine/memory/stream_ordered_memory.h).
  stats.gpu_peak_bytes = std::max(memory_.peak_bytes(), memory_.live_bytes());
  device_peak_ = std::max(device_peak_, stats.gpu_peak_bytes);
  stats.cpu_peak_bytes = cpu_bytes;
  stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count() +
      step_carried_seconds_;
}

}  // namespace strata::engine

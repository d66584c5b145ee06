#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "aio/aligned_buffer.h"
#include "engine/config/config.h"
#include "engine/memory/nvme_store.h"
#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"
#include "engine/optimizer.h"
#include "engine/zero/flat_layout.h"
#include "gpu/device.h"

namespace strata::engine::zero {

struct OptimizerOffloadOptions {
  // Where the optimizer states live: cpu or nvme (none is refused: there is nothing to offload).
  OffloadDevice device = OffloadDevice::cpu;
  std::int64_t sub_group_size = 1'000'000'000;  // zero_optimization.sub_group_size, elements
  bool pipeline_read = false;                   // offload_optimizer.pipeline_read
  bool pipeline_write = false;                  // offload_optimizer.pipeline_write
  std::int64_t buffer_count = 4;  // offload_optimizer.buffer_count: sub-groups in flight
  bool pin_memory = true;         // offload_optimizer.pin_memory (the swap buffers)
  // nvme: nvme_path, job, rank, aio options (and fault injection for tests).
  memory::NvmeStoreOptions nvme;
};

// The step's third stage (shared/DESIGN.md, "One training step", "Step"): a rank's optimizer
// states (fp32 master params and the optimizer's fp32 states) live in the CPU or NVMe tier, laid
// out per sub-group as [params | exp_avg | exp_avg_sq] (each region padded to 4 KiB); step() runs
// the optimizer sub-group by sub-group from a fp32 gradient partition. On NVMe, with
// pipeline_read the next sub-groups are read while the optimizer runs on the current one, with
// pipeline_write finished ones are written while the next runs, without them it is strictly
// read, compute, write; at most buffer_count sub-groups are in flight (one pool buffer each).
//
// A failed transfer (aio::IoError, ChecksumError) stops the step, marks the state inconsistent,
// and every later call throws a UserError saying to resume from the last checkpoint.
class OptimizerOffload {
 public:
  // Takes the fp32 master parameters of the rank's partition; the states start at zero. Throws
  // UserError for a refused configuration (device none, buffer_count < 1, sub_group_size < 1),
  // and the store's and pool's refusals (nvme_path, free space, RLIMIT_MEMLOCK).
  OptimizerOffload(gpu::Device& device, const Optimizer& optimizer,
                   std::span<const float> master_params, OptimizerOffloadOptions options);
  ~OptimizerOffload();
  OptimizerOffload(const OptimizerOffload&) = delete;
  OptimizerOffload& operator=(const OptimizerOffload&) = delete;

  // One optimizer step over the whole partition. `grads` has partition_numel() elements (the
  // reduced fp32 gradient partition, in pinned CPU memory). The new parameters go to `copy` as
  // `copy_type` (bf16/fp16 bit patterns; empty for none) and, when not empty, to `params_fp32`.
  void step(const StepHyperparameters& hyper, std::span<const float> grads, ParamCopy copy_type,
            std::span<std::uint16_t> copy, std::span<float> params_fp32 = {});

  // Copies the fp32 masters and states out (checkpoints, tests); empty spans are skipped.
  void read_states(std::span<float> params, std::span<float> exp_avg, std::span<float> exp_avg_sq);

  std::int64_t partition_numel() const noexcept { return numel_; }
  const std::vector<Range>& sub_groups() const noexcept { return sub_groups_; }
  bool inconsistent() const noexcept { return !failure_.empty(); }
  memory::ResidencyCounters counters() const { return residency_->counters(); }
  // The swap buffer pool (nvme only; null on cpu).
  const memory::PinnedPool* pool() const noexcept { return pool_.get(); }
  const memory::NvmeStore* store() const noexcept { return store_.get(); }
  // Most sub-groups in flight at once during the last step (nvme), for tests of buffer_count.
  std::int64_t peak_in_flight() const noexcept { return peak_in_flight_; }

 private:
  struct Regions {
    std::span<float> params, exp_avg, exp_avg_sq;
  };
  Regions regions(int sub_group, std::span<std::byte> bytes) const;
  void check_consistent() const;
  void run_step(const StepHyperparameters& hyper, std::span<const float> grads, ParamCopy copy_type,
                std::span<std::uint16_t> copy, std::span<float> params_fp32);
  void compute(int sub_group, std::span<std::byte> bytes, const StepHyperparameters& hyper,
               std::span<const float> grads, ParamCopy copy_type, std::span<std::uint16_t> copy,
               std::span<float> params_fp32);

  const Optimizer& optimizer_;
  OptimizerOffloadOptions options_;
  std::int64_t numel_;
  std::vector<Range> sub_groups_;
  std::vector<std::int64_t> region_bytes_;  // per sub-group, 4 KiB multiple
  bool has_exp_avg_;
  bool has_exp_avg_sq_;
  aio::AlignedBuffer cpu_states_;             // cpu tier: every sub-group's extent, back to back
  std::unique_ptr<memory::PinnedPool> pool_;  // before the store: the store's rings register it
  std::unique_ptr<memory::NvmeStore> store_;
  std::unique_ptr<memory::Residency> residency_;
  std::vector<memory::PartitionId> partitions_;  // per sub-group
  std::string failure_;                          // the first error, once inconsistent
  std::int64_t peak_in_flight_ = 0;
};

}  // namespace strata::engine::zero

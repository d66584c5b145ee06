#pragma once

#include <cstdint>
#include <vector>

#include "engine/engine.h"
#include "engine/optimizer.h"
#include "engine/optimizer_step.h"
#include "engine/zero/grad_reducer.h"
#include "engine/zero/param_tier.h"
#include "gpu/device_buffer.h"

namespace strata::engine {

// The optimizer on the device (offload_optimizer none): fp32 masters and moments in device
// memory, stepped one sub-group per fused optimizer op (gpu::Ops; on the host backend that is
// cpu_adam::step on the stream, on CUDA a kernel), each writing its new storage copy into the
// tier's device partition. Everything it does is queued on the compute stream before the step
// returns: nothing runs beside backward or the next forward.
class DeviceOptimizerStep final : public OptimizerStep {
 public:
  // The device memory of the states: the fp32 masters and the optimizer's fp32 moments
  // (Optimizer::state_count), one partition of each.
  struct Plan {
    std::int64_t state_bytes = 0;  // one state of the partition
    int states = 0;                // the masters and the moments
    std::int64_t device_bytes() const noexcept { return state_bytes * states; }
  };
  static Plan plan(std::int64_t partition_numel, int moments);

  // Allocates the plan: the masters and the moments `optimizer` keeps for `partition_numel`
  // elements.
  DeviceOptimizerStep(const Runtime& runtime, const Optimizer& optimizer, ParamCopy copy_type,
                      std::vector<zero::Range> sub_groups, std::int64_t partition_numel,
                      zero::ParamTier& tier);

  void connect(zero::GradReducer& reducer) override { reducer_ = &reducer; }
  bool step(const StepHyperparameters& hyper, StepStats& stats, const StatesVisitor& save) override;
  void fill_states(const StatesVisitor& fill) override;
  void visit_states(const StatesVisitor& visit) override;
  void read_masters(std::span<float> out) override;
  const std::vector<zero::Range>& sub_groups() const override { return sub_groups_; }

 private:
  gpu::Stream& stream() const { return runtime_.device.compute_stream(); }
  // Host memory for one chunk of each state the optimizer keeps, as States.
  States chunk_states(zero::Range range, std::vector<std::vector<float>>& host) const;

  const Runtime& runtime_;
  const Optimizer& optimizer_;
  ParamCopy copy_type_;
  std::vector<zero::Range> sub_groups_;
  std::int64_t partition_numel_;
  zero::ParamTier& tier_;
  zero::GradReducer* reducer_ = nullptr;
  gpu::DeviceBuffer master_;
  gpu::DeviceBuffer exp_avg_;
  gpu::DeviceBuffer exp_avg_sq_;
};

}  // namespace strata::engine

#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "engine/config/config.h"

namespace strata::engine {

// The element type of the parameter copy an optimizer step writes for the device: the device's
// storage type (bf16 or fp16), or none when the device computes from the fp32 master itself.
enum class ParamCopy { none, bf16, fp16 };

// What changes from step to step: the scheduler's lr (and betas, for OneCycle's momentum
// cycling), the step count (from 1) and the gradient multiplier (1 / loss scale times the
// clipping coefficient).
struct StepHyperparameters {
  double lr = 0;
  std::array<double, 2> betas = {0.9, 0.999};
  std::int64_t step = 1;
  float grad_scale = 1.0f;
};

// The optimizer the config chose (optimizer.type and its params), as one call over any slice of
// a partition. The update is elementwise, so cutting a partition into sub-groups or modules
// gives the same bits as one call over the whole (cpu_adam is bitwise identical for any tiling
// that keeps elements whole).
class Optimizer {
 public:
  explicit Optimizer(const OptimizerConfig& config);

  OptimizerType type() const { return config_.type; }
  // fp32 state arrays besides the master parameters: Adam/AdamW 2 (exp_avg, exp_avg_sq),
  // Adagrad 1 (exp_avg_sq), Lion 1 (exp_avg).
  int state_count() const;

  // Updates `params` (fp32 master) and the states in place. `exp_avg` / `exp_avg_sq` are empty
  // when the optimizer has no such state. `copy` receives the new parameters rounded to
  // `copy_type` (raw 16-bit patterns; empty for ParamCopy::none).
  void step(const StepHyperparameters& hyper, std::span<float> params, std::span<const float> grads,
            std::span<float> exp_avg, std::span<float> exp_avg_sq, ParamCopy copy_type,
            std::span<std::uint16_t> copy) const;

 private:
  OptimizerConfig config_;
};

}  // namespace strata::engine

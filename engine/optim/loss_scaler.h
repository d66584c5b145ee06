#pragma once

// fp16 loss scaling with the semantics of DeepSpeed's DynamicLossScaler and LossScaler
// (deepspeed/runtime/fp16/loss_scaler.py), as ZeRO builds them from the "fp16" section:
// init_scale = 2^initial_scale_power, scale_window = loss_scale_window, delayed_shift =
// hysteresis, consecutive_hysteresis, min_scale = min_loss_scale, scale_factor 2.
//
// Use per optimizer step:
//   const double scale = scaler.scale();      // multiply the loss by it before backward
//   ... backward, reduce, scan the gradients (GradStats) ...
//   const bool skip = scaler.update(overflow);  // overflow = any gradient inf or NaN
//   if (!skip) step with grad_scale from plan_grad_step(..., scale, ...)  (grad_clip.h)
// Note `scale` is read before update(): strata unscales with the scale the gradients were made
// with. DeepSpeed's ZeRO updates the scale first and unscales with the new one, so on the step
// where the scale doubles its gradients are divided by twice the scale backward used (see
// docs/optim.md); strata does not copy that.

#include <cstdint>

#include "engine/config/config.h"

namespace strata::engine::optim {

// Everything that changes from step to step: what a checkpoint saves (DeepSpeed pickles the same
// fields of its scaler object).
struct LossScalerState {
  double scale = 1;
  std::int64_t iteration = 0;                 // cur_iter: update() calls so far
  std::int64_t last_overflow_iteration = -1;  // last_overflow_iter
  std::int64_t hysteresis_left = 1;           // cur_hysteresis
  std::int64_t skipped_steps = 0;             // steps skipped for overflow (the engine's count)
};

class LossScaler {
 public:
  // fp16.enabled with loss_scale 0: dynamic scaling from 2^initial_scale_power. fp16.enabled with
  // loss_scale > 0: that static scale. fp16 off (bf16 or fp32): a static scale of 1, as
  // DeepSpeed's CreateLossScaler makes for other dtypes. Throws ConfigError (exit status 2) for
  // values DeepSpeed's validation refuses: a negative or non-finite loss_scale, a scale
  // 2^initial_scale_power that is not finite, loss_scale_window or hysteresis below 1,
  // min_loss_scale not positive and finite.
  explicit LossScaler(const Fp16Config& fp16);

  // The factor the loss is multiplied by before the coming backward.
  double scale() const { return state_.scale; }
  bool dynamic() const { return dynamic_; }

  // Records whether this step's gradients overflowed (any inf or NaN, on any rank: every rank
  // must pass the same verdict) and returns true when the optimizer step must be skipped, which
  // is exactly when `overflow` is true, for static scales as well. A dynamic scale then follows
  // DeepSpeed's update_scale:
  //   overflow: with hysteresis left above 1 (and hysteresis > 1), use one up and keep the scale;
  //     else halve the scale, not below min_loss_scale.
  //   no overflow: with consecutive_hysteresis, refill hysteresis; after loss_scale_window
  //     steps without overflow since the last one, double the scale (and refill hysteresis).
  // Throws UserError (exit status 1) on an overflow that would lower the scale below
  // min_loss_scale when it is already there, as DeepSpeed raises "Current loss scale already at
  // minimum": no scale left makes the gradients finite, so the run cannot progress.
  bool update(bool overflow);

  // Steps skipped so far for overflow.
  std::int64_t skipped_steps() const { return state_.skipped_steps; }

  const LossScalerState& state() const { return state_; }
  // Restores a checkpointed state (the config must be the one it was saved with). Throws
  // UserError (exit status 1) for a state no run could reach (a scale not positive and finite,
  // counters out of order, hysteresis_left outside [1, fp16.hysteresis]).
  void restore(const LossScalerState& state);

 private:
  void lower_scale();

  bool dynamic_ = false;
  std::int64_t scale_window_ = 1000;
  double min_scale_ = 1;
  std::int64_t hysteresis_ = 2;  // delayed_shift
  bool consecutive_hysteresis_ = false;
  LossScalerState state_;
};

}  // namespace strata::engine::optim

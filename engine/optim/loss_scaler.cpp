// DeepSpeed's DynamicLossScaler.update_scale and its static LossScaler
// (deepspeed/runtime/fp16/loss_scaler.py); docs/optim.md works through the sequences.
#include "engine/optim/loss_scaler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "engine/config/config_error.h"

namespace strata::engine::optim {
namespace {

constexpr double kScaleFactor = 2.0;  // DynamicLossScaler.scale_factor, not configurable

bool positive_finite(double value) {
  return std::isfinite(value) && value > 0;
}

void validate(const Fp16Config& fp16) {
  std::vector<std::string> problems;
  if (!std::isfinite(fp16.loss_scale) || fp16.loss_scale < 0)
    problems.push_back(fmt::format(
        "fp16.loss_scale: got {}, expected 0 (dynamic) or a finite scale > 0", fp16.loss_scale));
  if (fp16.loss_scale == 0) {
    const double initial = std::ldexp(
        1.0, static_cast<int>(std::clamp<std::int64_t>(fp16.initial_scale_power, -2000, 2000)));
    if (!positive_finite(initial))
      problems.push_back(fmt::format(
          "fp16.initial_scale_power: got {}, expected a power whose 2^power is a finite positive "
          "number (DeepSpeed's default is 16)",
          fp16.initial_scale_power));
    if (fp16.loss_scale_window < 1)
      problems.push_back(fmt::format("fp16.loss_scale_window: got {}, expected an integer >= 1",
                                     fp16.loss_scale_window));
    if (fp16.hysteresis < 1)
      problems.push_back(
          fmt::format("fp16.hysteresis: got {}, expected an integer >= 1", fp16.hysteresis));
    if (!positive_finite(fp16.min_loss_scale))
      problems.push_back(fmt::format("fp16.min_loss_scale: got {}, expected a finite number > 0",
                                     fp16.min_loss_scale));
  }
  if (!problems.empty()) throw ConfigError("config", std::move(problems));
}

}  // namespace

LossScaler::LossScaler(const Fp16Config& fp16) {
  if (!fp16.enabled) return;  // bf16 and fp32: a static scale of 1, never checked
  validate(fp16);
  if (fp16.loss_scale > 0) {
    state_.scale = fp16.loss_scale;
    return;
  }
  dynamic_ = true;
  scale_window_ = fp16.loss_scale_window;
  min_scale_ = fp16.min_loss_scale;
  hysteresis_ = fp16.hysteresis;
  consecutive_hysteresis_ = fp16.consecutive_hysteresis;
  state_.scale = std::ldexp(1.0, static_cast<int>(fp16.initial_scale_power));
  state_.hysteresis_left = hysteresis_;
}

bool LossScaler::update(bool overflow) {
  if (overflow) ++state_.skipped_steps;
  if (!dynamic_) return overflow;  // LossScaler.update_scale does nothing
  if (overflow) {
    if (hysteresis_ == 1 || state_.hysteresis_left == 1) {
      lower_scale();
    } else {
      --state_.hysteresis_left;
      base::logger("engine").debug(
          "fp16 overflow: step skipped, loss_scale={} kept, hysteresis_left={}", state_.scale,
          state_.hysteresis_left);
    }
    state_.last_overflow_iteration = state_.iteration;
  } else {
    if (consecutive_hysteresis_) state_.hysteresis_left = hysteresis_;
    const std::int64_t stable_interval = state_.iteration - state_.last_overflow_iteration - 1;
    if (stable_interval > 0 && stable_interval % scale_window_ == 0) {
      if (!consecutive_hysteresis_) state_.hysteresis_left = hysteresis_;
      state_.scale *= kScaleFactor;
    }
  }
  ++state_.iteration;
  return overflow;
}

// The branch of update_scale that halves the scale, and its refusal at the floor
// (raise_error_at_min_scale, which ZeRO leaves at its default, true).
void LossScaler::lower_scale() {
  if (state_.scale == min_scale_) {
    --state_.skipped_steps;  // the step is not skipped: the run stops here
    throw UserError(
        fmt::format("fp16 gradients overflowed (inf or NaN) with the loss scale already at its "
                    "minimum, fp16.min_loss_scale = {}: no smaller scale can make them finite",
                    min_scale_),
        "the model diverged or its gradients exceed fp16's range: lower optimizer.params.lr or "
        "add warmup (scheduler), keep gradient_clipping on, or train in bf16 (\"bf16\": "
        "{\"enabled\": true}, \"fp16\": {\"enabled\": false}); lowering fp16.min_loss_scale only "
        "helps when the overflow comes from the scale itself",
        1);
  }
  const double next = std::max(state_.scale / kScaleFactor, min_scale_);
  base::logger("engine").debug("fp16 overflow: step skipped, loss_scale={} lowered to {}",
                               state_.scale, next);
  state_.scale = next;
}

void LossScaler::restore(const LossScalerState& state) {
  const bool valid =
      positive_finite(state.scale) && state.iteration >= 0 && state.last_overflow_iteration >= -1 &&
      state.last_overflow_iteration < state.iteration && state.hysteresis_left >= 1 &&
      state.hysteresis_left <= hysteresis_ && state.skipped_steps >= 0;
  if (!valid)
    throw UserError(
        fmt::format("the checkpoint's loss scaler state is invalid: scale={} iteration={} "
                    "last_overflow_iteration={} hysteresis_left={} (fp16.hysteresis={}) "
                    "skipped_steps={}",
                    state.scale, state.iteration, state.last_overflow_iteration,
                    state.hysteresis_left, hysteresis_, state.skipped_steps),
        "load a checkpoint written by strata with the same fp16 section, or start the run "
        "without it",
        1);
  state_ = state;
}

}  // namespace strata::engine::optim

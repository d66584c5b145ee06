// The formulas of deepspeed/runtime/lr_schedules.py (DeepSpeed commit 22779f2c), one function per
// schedule; docs/optim.md derives each. Every division DeepSpeed does in Python floats is done
// here in double, in the same order, so that values agree to the last bit or two.
#include "engine/optim/lr_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "base/assert.h"
#include "base/log.h"
#include "engine/config/config_error.h"

namespace strata::engine::optim {
namespace {

// OneCycle writes (momentum, 0.99) into the optimizer's betas: beta2 is a constant of DeepSpeed's
// code (OneCycle._initialize_momentum), not a config key.
constexpr double kOneCycleBeta2 = 0.99;

bool uses_warmup(SchedulerType type) {
  return type == SchedulerType::warmup_lr || type == SchedulerType::warmup_decay_lr ||
         type == SchedulerType::warmup_cosine_lr;
}

void check_lr(std::vector<std::string>& problems, const char* key, double value) {
  if (std::isfinite(value) && value >= 0) return;
  problems.push_back(
      fmt::format("scheduler.params.{}: got {}, expected a finite number >= 0", key, value));
}

void check_at_least(std::vector<std::string>& problems, const char* key, std::int64_t value,
                    std::int64_t least, const char* why) {
  if (value >= least) return;
  problems.push_back(fmt::format("scheduler.params.{}: got {}, expected an integer >= {} ({})", key,
                                 value, least, why));
}

// The values DeepSpeed's constructors refuse (ValueError, or a ZeroDivisionError later), and the
// non-finite ones that would turn every weight into NaN. The config loader refuses them too;
// this guards an LrSchedule built from a Config made in code.
void validate(const SchedulerConfig& s, const OptimizerConfig& optimizer) {
  std::vector<std::string> problems;
  if (!std::isfinite(optimizer.lr) || optimizer.lr < 0)
    problems.push_back(
        fmt::format("optimizer.params.lr: got {}, expected a finite number >= 0", optimizer.lr));
  check_at_least(problems, "last_batch_iteration", s.last_batch_iteration, -1,
                 "-1 starts the schedule");
  // 0 is what the HF Trainer fills an "auto" warm-up with by default (get_warmup_steps()); it
  // warms up over 2 steps like any value below 2 (the constructor's max(2, ...)).
  if (uses_warmup(s.type))
    check_at_least(problems, "warmup_num_steps", s.warmup_num_steps, 0, "0 or more warm-up steps");
  if (s.type == SchedulerType::warmup_lr || s.type == SchedulerType::warmup_decay_lr) {
    check_lr(problems, "warmup_min_lr", s.warmup_min_lr);
    check_lr(problems, "warmup_max_lr", s.warmup_max_lr);
  }
  if (s.type == SchedulerType::warmup_cosine_lr) {
    check_lr(problems, "warmup_min_ratio", s.warmup_min_ratio);
    check_lr(problems, "cos_min_ratio", s.cos_min_ratio);
  }
  if (s.type == SchedulerType::one_cycle) {
    check_lr(problems, "cycle_min_lr", s.cycle_min_lr);
    check_lr(problems, "cycle_max_lr", s.cycle_max_lr);
    check_lr(problems, "decay_lr_rate", s.decay_lr_rate);
    check_at_least(problems, "cycle_first_step_size", s.cycle_first_step_size, 1,
                   "a half cycle needs a step");
    check_at_least(problems, "cycle_second_step_size", s.cycle_second_step_size, 1,
                   "a half cycle needs a step");
    check_at_least(problems, "cycle_first_stair_count", s.cycle_first_stair_count, 0,
                   "0 = no stairs");
    check_at_least(problems, "cycle_second_stair_count", s.cycle_second_stair_count, 0,
                   "0 = no stairs");
    check_at_least(problems, "decay_step_size", s.decay_step_size, 0, "0 = no decay");
  }
  if (!problems.empty()) throw ConfigError("config", std::move(problems));
}

}  // namespace

LrSchedule::LrSchedule(const SchedulerConfig& scheduler, const OptimizerConfig& optimizer)
    : scheduler_(scheduler), optimizer_(optimizer) {
  validate(scheduler_, optimizer_);
  // WarmupLR and WarmupCosineLR: self.warmup_num_steps = max(2, warmup_num_steps), so that
  // log(warmup_num_steps) is never 0.
  warmup_steps_ = std::max<std::int64_t>(2, scheduler_.warmup_num_steps);
  inverse_log_warmup_ = 1.0 / std::log(static_cast<double>(warmup_steps_));
  if (scheduler_.type == SchedulerType::one_cycle && scheduler_.cycle_momentum) {
    cycles_momentum_ = optimizer_.type != OptimizerType::adagrad;
    if (!cycles_momentum_)
      base::logger("engine").warn(
          "scheduler=OneCycle cycle_momentum=true optimizer=Adagrad: Adagrad has no betas, so "
          "the momentum cycle is off (as in DeepSpeed)");
  }
}

std::int64_t LrSchedule::batch_iteration(std::int64_t applied_steps) const {
  STRATA_ASSERT(applied_steps >= 0);
  return scheduler_.last_batch_iteration + applied_steps;
}

double LrSchedule::lr(std::int64_t applied_steps) const {
  return lr_at_iteration(batch_iteration(applied_steps));
}

std::array<double, 2> LrSchedule::betas(std::int64_t applied_steps) const {
  return betas_at_iteration(batch_iteration(applied_steps));
}

double LrSchedule::lr_at_iteration(std::int64_t iteration) const {
  STRATA_ASSERT(iteration >= -1);
  const SchedulerConfig& s = scheduler_;
  switch (s.type) {
    case SchedulerType::none:
      return optimizer_.lr;
    case SchedulerType::warmup_lr:
      // get_lr() before the first step() returns min_lrs.
      if (iteration < 0) return s.warmup_min_lr;
      return s.warmup_min_lr + (s.warmup_max_lr - s.warmup_min_lr) * warmup_gamma(iteration);
    case SchedulerType::warmup_decay_lr:
      if (iteration < 0) return s.warmup_min_lr;
      return s.warmup_min_lr + (s.warmup_max_lr - s.warmup_min_lr) * warmup_decay_gamma(iteration);
    case SchedulerType::warmup_cosine_lr:
      // get_lr() before the first step() returns 0.0 for every group (not warmup_min_ratio * lr).
      if (iteration < 0) return 0.0;
      return optimizer_.lr * warmup_cosine_ratio(iteration);
    case SchedulerType::one_cycle:
      return one_cycle_lr(iteration);
  }
  STRATA_ASSERT(false);
  return 0;
}

std::array<double, 2> LrSchedule::betas_at_iteration(std::int64_t iteration) const {
  STRATA_ASSERT(iteration >= -1);
  if (!cycles_momentum_) return optimizer_.betas;
  // The constructor (last_batch_iteration == -1) writes min_moms = (cycle_min_mom, 0.99), while
  // the cycle formula at the same point would give cycle_max_mom: DeepSpeed's first step runs at
  // cycle_min_mom and its second jumps to nearly cycle_max_mom. strata keeps that.
  if (iteration < 0) return {scheduler_.cycle_min_mom, kOneCycleBeta2};
  return {one_cycle_momentum(iteration), kOneCycleBeta2};
}

// WarmupLR._get_gamma: log(i + 1) / log(W) or i / W while i < W, then 1.
double LrSchedule::warmup_gamma(std::int64_t iteration) const {
  if (iteration >= warmup_steps_) return 1.0;
  if (scheduler_.warmup_type == WarmupType::log)
    return inverse_log_warmup_ * std::log(static_cast<double>(iteration + 1));
  return static_cast<double>(iteration) / static_cast<double>(warmup_steps_);
}

// WarmupDecayLR._get_gamma: the warmup, then max(0, (T - i) / max(1, T - W)), which is 1 at
// i = W and 0 from i = T on.
double LrSchedule::warmup_decay_gamma(std::int64_t iteration) const {
  if (iteration < warmup_steps_) return warmup_gamma(iteration);
  const double total = static_cast<double>(scheduler_.total_num_steps);
  const double left = total - static_cast<double>(iteration);
  const double span = std::max(1.0, total - static_cast<double>(warmup_steps_));
  return std::max(0.0, left / span);
}

// WarmupCosineLR.get_lr_ratio: warmup_min_ratio + gamma * (1 - warmup_min_ratio) while i < W;
// then cos_min_ratio + (1 - cos_min_ratio) * (1 + cos(pi * p)) / 2 with
// p = min(1, (i - W + 1) / max(1, T - W)), floored at 0.
double LrSchedule::warmup_cosine_ratio(std::int64_t iteration) const {
  const SchedulerConfig& s = scheduler_;
  if (iteration < warmup_steps_)
    return s.warmup_min_ratio + warmup_gamma(iteration) * (1.0 - s.warmup_min_ratio);
  const auto real_last_step = static_cast<double>(iteration - warmup_steps_ + 1);
  const auto real_total_steps =
      static_cast<double>(std::max<std::int64_t>(1, s.total_num_steps - warmup_steps_));
  const double progress = std::min(1.0, real_last_step / real_total_steps);
  const double ratio = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
  return std::max(0.0, s.cos_min_ratio + (1.0 - s.cos_min_ratio) * ratio);
}

// OneCycle._get_scale_factor: where batch_iteration = i + 1 sits in its cycle, 0 at the cycle's
// start, 1 at the end of the first half, back to 0 at the end of the second; with a stair count,
// floor(position * stairs) / stairs from the integer offset in the cycle.
double LrSchedule::one_cycle_scale(std::int64_t iteration) const {
  const SchedulerConfig& s = scheduler_;
  const auto first = static_cast<double>(s.cycle_first_step_size);
  const auto second = static_cast<double>(s.cycle_second_step_size);
  const double total = first + second;
  const double step_ratio = first / total;
  const auto batch = static_cast<double>(iteration + 1);
  const double cycle = std::floor(1.0 + batch / total);
  const double x = 1.0 + batch / total - cycle;
  double scale = 0;
  std::int64_t stairs = 0;
  if (x <= step_ratio) {
    scale = x / step_ratio;
    stairs = s.cycle_first_stair_count;
  } else {
    scale = (x - 1.0) / (step_ratio - 1.0);
    stairs = s.cycle_second_stair_count;
  }
  if (stairs > 0) {
    const auto count = static_cast<double>(stairs);
    const double in_cycle = std::fmod(batch, total);  // Python's % for batch >= 0
    const double position =
        in_cycle <= first ? in_cycle * count / first : (total - in_cycle) * count / second;
    scale = std::floor(position) / count;
  }
  return scale;
}

// OneCycle.get_lr: cycle_min_lr + (cycle_max_lr - cycle_min_lr) * scale while i < F + S; then
// cycle_min_lr / (1 + decay_lr_rate * (i - F - S + 1) / decay_step_size), or cycle_min_lr when
// decay_lr_rate or decay_step_size is 0.
double LrSchedule::one_cycle_lr(std::int64_t iteration) const {
  const SchedulerConfig& s = scheduler_;
  const auto total = static_cast<double>(s.cycle_first_step_size + s.cycle_second_step_size);
  if (static_cast<double>(iteration) < total)
    return s.cycle_min_lr + (s.cycle_max_lr - s.cycle_min_lr) * one_cycle_scale(iteration);
  if (s.decay_lr_rate == 0 || s.decay_step_size == 0) return s.cycle_min_lr;
  const double decay_iteration = static_cast<double>(iteration) - total + 1.0;
  const double interval = decay_iteration / static_cast<double>(s.decay_step_size);
  return s.cycle_min_lr / (1.0 + s.decay_lr_rate * interval);
}

// OneCycle.get_mom: cycle_max_mom - (cycle_max_mom - cycle_min_mom) * scale in the cycle; then
// cycle_max_mom * (1 + decay_mom_rate * (i - F - S + 1) / decay_step_size) (DeepSpeed multiplies:
// the momentum grows after the cycle), or cycle_max_mom when either is 0.
double LrSchedule::one_cycle_momentum(std::int64_t iteration) const {
  const SchedulerConfig& s = scheduler_;
  const auto total = static_cast<double>(s.cycle_first_step_size + s.cycle_second_step_size);
  if (static_cast<double>(iteration) < total)
    return s.cycle_max_mom - (s.cycle_max_mom - s.cycle_min_mom) * one_cycle_scale(iteration);
  if (s.decay_mom_rate == 0 || s.decay_step_size == 0) return s.cycle_max_mom;
  const double decay_iteration = static_cast<double>(iteration) - total + 1.0;
  const double interval = decay_iteration / static_cast<double>(s.decay_step_size);
  return s.cycle_max_mom * (1.0 + s.decay_mom_rate * interval);
}

}  // namespace strata::engine::optim

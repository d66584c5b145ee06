#pragma once

// DeepSpeed's learning-rate schedules (deepspeed/runtime/lr_schedules.py): WarmupLR,
// WarmupDecayLR, WarmupCosineLR and OneCycle (with its momentum cycle), as pure functions of the
// step, so that a resumed run and every rank compute the same value. docs/optim.md gives each
// formula with its source.
//
// Counting steps. DeepSpeed builds the scheduler with last_batch_iteration = -1, which already
// sets the optimizer's lr to the schedule's value at index -1; the first optimizer step runs with
// it. After every *applied* optimizer step the engine calls scheduler.step(), which increments
// last_batch_iteration; a step skipped for an fp16 overflow does not (engine.py,
// _take_model_step). So the lr of an optimizer step is the schedule at
//   last_batch_iteration = scheduler.last_batch_iteration + applied_steps
// where applied_steps counts the steps applied before it. Example, WarmupLR log warmup: the 1st
// step (index -1) and the 2nd (index 0, log(1) = 0) both run at warmup_min_lr.

#include <array>
#include <cstdint>

#include "engine/config/config.h"

namespace strata::engine::optim {

class LrSchedule {
 public:
  // Takes the resolved scheduler and optimizer sections. Throws UserError (exit status 2) naming
  // the scheduler.params key when a value the config loader refuses reaches it (a negative
  // warmup_num_steps, a OneCycle step size below 1, a negative or non-finite lr).
  LrSchedule(const SchedulerConfig& scheduler, const OptimizerConfig& optimizer);

  SchedulerType type() const { return scheduler_.type; }

  // DeepSpeed's last_batch_iteration for the optimizer step that follows `applied_steps` applied
  // (not skipped) steps of this run: scheduler.last_batch_iteration + applied_steps.
  std::int64_t batch_iteration(std::int64_t applied_steps) const;

  // The learning rate of the optimizer step that follows `applied_steps` applied steps.
  double lr(std::int64_t applied_steps) const;

  // The learning rate at DeepSpeed's last_batch_iteration (>= -1), the schedule itself.
  double lr_at_iteration(std::int64_t last_batch_iteration) const;

  // True for OneCycle with cycle_momentum and an optimizer with betas (Adam, AdamW, Lion);
  // DeepSpeed turns the momentum cycle off, with a warning, for Adagrad.
  bool cycles_momentum() const { return cycles_momentum_; }

  // The optimizer's (beta1, beta2) for the step that follows `applied_steps` applied steps:
  // optimizer.betas unless cycles_momentum(). While cycling, DeepSpeed's OneCycle writes
  // (momentum, 0.99) into the param group, so beta2 becomes 0.99 whatever optimizer.betas says.
  std::array<double, 2> betas(std::int64_t applied_steps) const;
  double beta1(std::int64_t applied_steps) const { return betas(applied_steps)[0]; }

  // The betas at DeepSpeed's last_batch_iteration (>= -1).
  std::array<double, 2> betas_at_iteration(std::int64_t last_batch_iteration) const;

 private:
  double warmup_gamma(std::int64_t iteration) const;
  double warmup_decay_gamma(std::int64_t iteration) const;
  double warmup_cosine_ratio(std::int64_t iteration) const;
  double one_cycle_scale(std::int64_t iteration) const;
  double one_cycle_lr(std::int64_t iteration) const;
  double one_cycle_momentum(std::int64_t iteration) const;

  SchedulerConfig scheduler_;
  OptimizerConfig optimizer_;
  std::int64_t warmup_steps_ = 2;  // max(2, warmup_num_steps), as DeepSpeed clamps it
  double inverse_log_warmup_ = 0;  // 1 / log(warmup_steps_)
  bool cycles_momentum_ = false;
};

}  // namespace strata::engine::optim

#pragma once

// Gradient clipping by global L2 norm and the inf/NaN verdict, as DeepSpeed's ZeRO computes them
// (deepspeed/runtime/zero/stage3.py and stage_1_and_2.py: get_grad_norm_direct,
// unscale_and_clip_grads), folded into the one multiplier strata's CPU optimizers take
// (cpu_adam::step's grad_scale). docs/optim.md gives the derivation.
//
// How a step uses it, on every rank:
//   1. Each rank scans its own gradient shard, sub-group by sub-group
//      (cpu_adam::scan_gradients), and adds the sub-groups' sum_squares in sub-group order.
//      Padding past the end of a module's tensors is zero, so it adds nothing.
//   2. The ranks combine their sums into one scalar that is bitwise the same on every rank:
//      all-gather the per-rank doubles and add them with sum_of_squares() in rank order (or an
//      all-reduce SUM of one double, whose result every rank receives identically). An inf or
//      NaN gradient anywhere makes the sum inf or NaN, so the same scalar carries the overflow
//      verdict and no separate flag needs reducing: squares of finite fp32 values summed in
//      double cannot overflow (FLT_MAX^2 ~ 1.2e77, far below DBL_MAX).
//   3. plan_grad_step(sum, scaler.scale(), config.gradient_clipping) gives the unscaled norm,
//      whether it overflowed, and grad_scale; LossScaler::update(plan.overflow &&
//      checks_overflow(...)) says whether to skip; a step that runs passes plan.grad_scale to
//      the optimizer kernel.

#include <span>

#include "engine/config/config.h"

namespace strata::engine::optim {

// DeepSpeed's guard against a zero norm in the clip ratio (and torch's clip_grad_norm_'s).
inline constexpr double kClipEpsilon = 1e-6;

// Adds partial sums of squared gradients (per sub-group, or per rank after an all-gather) in the
// order given, so that the same parts always give the same bits.
double sum_of_squares(std::span<const double> parts);

// The L2 norm of the unscaled gradients from the global sum of squares of the gradients as held
// (multiplied by loss_scale): sqrt(sum) / loss_scale. Inf or NaN when any gradient is.
double grad_norm(double global_sum_squares, double loss_scale);

// DeepSpeed's clipping factor for an unscaled global norm: with clip = (norm + 1e-6) / max_norm,
// 1 / clip when clip > 1, else 1 (no clipping). So gradients are scaled by
// max_norm / (norm + 1e-6) exactly when norm + 1e-6 > max_norm, which is torch's
// clip_grad_norm_ rule too. max_norm <= 0 (gradient_clipping 0) turns clipping off: 1. A norm
// that is inf or NaN gives 1, as in DeepSpeed, which replaces such a norm by -1 before this test;
// that step is skipped anyway unless overflow checking is off. A zero norm gives 1.
double clip_coefficient(double grad_norm, double max_norm);

// What the optimizer step does with this step's gradients.
struct GradStepPlan {
  bool overflow = false;        // some gradient on some rank is inf or NaN
  double grad_norm = 0;         // unscaled global L2 norm (DeepSpeed's _global_grad_norm)
  double clip_coefficient = 1;  // 1 = not clipped
  // The multiplier for the CPU optimizer's gradients: clip_coefficient / loss_scale, which is
  // DeepSpeed's 1 / combined_scale with combined_scale = loss_scale * max(1, clip).
  float grad_scale = 1;
};

// From the global sum of squares of the gradients as held after backward with loss scale
// `loss_scale` (the scale read *before* LossScaler::update), and config.gradient_clipping.
// loss_scale must be positive and finite (LossScaler guarantees it).
GradStepPlan plan_grad_step(double global_sum_squares, double loss_scale, double max_norm);

// The step's rules that a config decides alone (engine/config/config.h): whether an inf or NaN
// gradient skips the step, and whether the gradients can change how a step runs at all.
using engine::checks_overflow;
using engine::gradients_can_change_the_step;

}  // namespace strata::engine::optim

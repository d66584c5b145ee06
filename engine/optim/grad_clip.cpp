// Global-norm clipping and the combined gradient multiplier (docs/optim.md).
#include "engine/optim/grad_clip.h"

#include <cmath>

#include "base/assert.h"

namespace strata::engine::optim {
namespace {

// DeepSpeed's clip = ((total_norm / loss_scale) + 1e-6) / clip_grad when it exceeds 1, else 1:
// the factor the unscaled gradients are divided by.
double clip_divisor(double grad_norm, double max_norm) {
  if (!(max_norm > 0) || !std::isfinite(grad_norm)) return 1.0;
  const double clip = (grad_norm + kClipEpsilon) / max_norm;
  return clip > 1.0 ? clip : 1.0;
}

}  // namespace

double sum_of_squares(std::span<const double> parts) {
  double total = 0;
  for (double part : parts)
    total += part;
  return total;
}

double grad_norm(double global_sum_squares, double loss_scale) {
  STRATA_ASSERT(!(global_sum_squares < 0));  // NaN passes: it is an overflow verdict
  STRATA_ASSERT(std::isfinite(loss_scale) && loss_scale > 0);
  return std::sqrt(global_sum_squares) / loss_scale;
}

double clip_coefficient(double grad_norm, double max_norm) {
  return 1.0 / clip_divisor(grad_norm, max_norm);
}

GradStepPlan plan_grad_step(double global_sum_squares, double loss_scale, double max_norm) {
  GradStepPlan plan;
  plan.grad_norm = grad_norm(global_sum_squares, loss_scale);
  plan.overflow = !std::isfinite(plan.grad_norm);
  const double divisor = clip_divisor(plan.grad_norm, max_norm);
  plan.clip_coefficient = 1.0 / divisor;
  // unscale_and_clip_grads: combined_scale = clip * loss_scale; grad.mul_(1. / combined_scale).
  plan.grad_scale = static_cast<float>(1.0 / (divisor * loss_scale));
  return plan;
}

}  // namespace strata::engine::optim

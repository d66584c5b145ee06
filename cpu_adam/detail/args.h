#pragma once

// The per-call constants of each update rule (update_rules.h), computed in double from a step's
// configuration and rounded to fp32 once: what cpu_adam::step hands its kernels, and what the CUDA
// optimizer (gpu/cuda) hands its own, so that both start from the same bits. The configuration
// is not checked here; step() and the callers check it with validate() first.

#include <cstdint>

#include "cpu_adam/detail/kernels.h"
#include "cpu_adam/optimizer.h"

namespace strata::cpu_adam::detail {

AdamArgs adam_args(const AdamConfig& config, std::int64_t step, float grad_scale);
AdagradArgs adagrad_args(const AdagradConfig& config, float grad_scale);
LionArgs lion_args(const LionConfig& config, float grad_scale);

}  // namespace strata::cpu_adam::detail

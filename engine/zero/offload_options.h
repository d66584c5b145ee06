#pragma once

#include "aio/options.h"
#include "engine/config/config.h"
#include "engine/zero/optimizer_offload.h"
#include "engine/zero/param_tier.h"

namespace strata::engine::zero {

// The aio block of a config as the I/O engine's options (environment overrides applied).
aio::EngineOptions aio_options(const AioConfig& aio);

// The offloaded optimizer's and the parameter tier's options for rank `rank`, from the config's
// zero_optimization.offload_optimizer / offload_param, aio and strata.job_name.
OptimizerOffloadOptions optimizer_offload_options(const Config& config, int rank);
ParamTierOptions param_tier_options(const Config& config, int rank, std::int64_t element_bytes);

}  // namespace strata::engine::zero

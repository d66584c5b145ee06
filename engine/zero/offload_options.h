#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "aio/options.h"
#include "engine/config/config.h"
#include "engine/zero/optimizer_offload.h"
#include "engine/zero/param_tier.h"
#include "gpu/pinned_limit.h"

namespace strata::engine::zero {

// The aio block of a config as the I/O engine's options (environment overrides applied).
aio::EngineOptions aio_options(const AioConfig& aio);

// The offloaded optimizer's and the parameter tier's options for rank `rank`, from the config's
// zero_optimization.offload_optimizer / offload_param, aio and strata.job_name.
OptimizerOffloadOptions optimizer_offload_options(const Config& config, int rank);
ParamTierOptions param_tier_options(const Config& config, int rank, std::int64_t element_bytes);

// Whether an offloaded section (offload_param or offload_optimizer with a device) asks for
// page-locked memory (pin_memory).
bool pins_memory(const Config& config);

// Settles pin_memory before the run allocates anything: `pinned_bytes` is the page-locked memory
// the run would hold (the estimate's pinned terms, as `strata estimate` prints them),
// `held_bytes` what the device already holds locked, `limit` what the kernel lets this process
// lock (gpu::pinned_limit()). When they fit, or nothing asks for pinning, `config` is left alone
// and nullopt returned. When they do not, pin_memory is turned off in both offload sections (the
// run trains from unpinned host memory, as DeepSpeed's default does) and the one warning to
// print is returned: how much was asked, the limit, and how to get it or silence it. With
// strata.require_pinned_memory the run is refused instead: UserError (exit status 1) naming the
// same.
std::optional<std::string> settle_pin_memory(Config& config, std::int64_t pinned_bytes,
                                             std::int64_t held_bytes,
                                             const gpu::PinnedLimit& limit);

}  // namespace strata::engine::zero

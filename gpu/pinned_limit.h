#pragma once

#include <cstdint>
#include <string>

#include "base/error.h"

namespace strata::gpu {

// The soft RLIMIT_MEMLOCK in bytes, or -1 when unlimited or unknown.
std::int64_t memlock_limit_bytes();

// The refusal of page-locked host memory, whichever backend met it (mlock on the host device,
// cudaHostAlloc on CUDA): the cause names the request, what refused it (`refusal`, e.g. "mlock
// failed with ENOMEM (...)"), the locked-memory limit (`limit_bytes` < 0: unlimited) and what the
// device already holds locked; the fix says how to raise the limit (ulimit -l, limits.conf,
// --ulimit memlock) or to pin less.
UserError pinned_memory_refused(std::int64_t asked_bytes, const std::string& refusal,
                                std::int64_t limit_bytes, std::int64_t held_bytes);

}  // namespace strata::gpu

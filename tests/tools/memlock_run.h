#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tests/tools/run_strata.h"

namespace strata::tools::testing {

// Runs STRATA_BINARY with `arguments`, as run_strata does, in a process that may lock at most
// `limit_bytes`: CAP_IPC_LOCK dropped and RLIMIT_MEMLOCK lowered before execve
// (gpu::testing::limit_locked_memory), as a non-root user or a container without the capability
// runs it. Exit status 121-124: the child could not drop the capability or lower the limit.
RunResult run_strata_locking_at_most(std::int64_t limit_bytes,
                                     const std::vector<std::string>& arguments);

}  // namespace strata::tools::testing

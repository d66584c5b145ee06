#pragma once

#include <memory>

#include "gpu/ops.h"

namespace strata::gpu::host {

// The host backend's gpu::Ops: each op enqueues the matching gpu/host/kernels function on its
// stream. OpsOptions do not apply (they choose CUDA's product and attention paths).
std::unique_ptr<Ops> create_host_ops();

}  // namespace strata::gpu::host

#pragma once

#include <cstdint>

#include "gpu/device.h"
#include "gpu/stream.h"

namespace strata::gpu {

// Copies `bytes` bytes with the backend's own plain primitive and returns when they have
// arrived, outside every strata stream: memcpy on the host device, cudaMemcpyAsync on the
// runtime's per-thread stream followed by its synchronization on CUDA. Benchmarks use it as the
// bound beside the engine's stream copies of the same bytes (`strata bench h2d`); `kind` says
// which side is device memory, as for Stream::copy.
void plain_copy(Device& device, void* target, const void* source, std::int64_t bytes,
                CopyKind kind);

}  // namespace strata::gpu

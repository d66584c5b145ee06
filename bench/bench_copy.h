#pragma once

// Timing the device's copies, for `strata bench h2d` and the bounds of `strata bench decode`.

#include <cstdint>

#include "gpu/device.h"
#include "gpu/stream.h"

namespace strata::tools::bench {

struct CopyTimes {
  double engine_seconds = 1e30;
  double plain_seconds = 1e30;
};

// Best times of `steps` stream copies (each timed between two events on the stream, as a CUDA
// timeline would time it) and `steps` plain copies (gpu::plain_copy) between the same buffers,
// alternated so that both see the same machine load, after one warm-up of each.
CopyTimes copy_times(gpu::Device& device, gpu::Stream& stream, void* target, const void* source,
                     std::int64_t bytes, gpu::CopyKind kind, int steps);

}  // namespace strata::tools::bench

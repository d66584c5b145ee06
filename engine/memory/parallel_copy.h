#pragma once

#include <cstddef>
#include <span>

namespace strata::engine::memory {

// Copies `source` into `target` (the same size, not overlapping) with TBB's threads. For the
// copies of whole sub-groups in host memory (a kept prior value, its new parameters): a copy of
// a gigabyte is memory-bound, and one thread reaches a fraction of the bandwidth that the cores
// together do.
void copy_in_parallel(std::span<std::byte> target, std::span<const std::byte> source);

}  // namespace strata::engine::memory

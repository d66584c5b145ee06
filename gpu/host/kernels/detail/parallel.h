#pragma once

#include <cstdint>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

namespace strata::gpu::host::kernels::detail {

// Runs body(begin, end) over [0, count) in chunks of at most `grain` items. The simple partitioner
// splits the range by halving until a piece is no larger than `grain`, so the pieces depend on
// `count` and `grain` only, never on the thread count. Every kernel also keeps each output
// element's floating-point sum inside one piece, in a fixed order, so results are bitwise the
// same for any number of threads.
template <typename Body>
void parallel_chunks(std::int64_t count, std::int64_t grain, const Body& body) {
  if (count <= 0) return;
  tbb::parallel_for(
      tbb::blocked_range<std::int64_t>(0, count, grain > 0 ? grain : 1),
      [&body](const tbb::blocked_range<std::int64_t>& range) { body(range.begin(), range.end()); },
      tbb::simple_partitioner());
}

// A grain that gives each task about `work_per_task` scalar operations when one item costs
// `work_per_item`; at least one item.
inline std::int64_t grain_for(std::int64_t work_per_item, std::int64_t work_per_task = 32768) {
  if (work_per_item <= 0) return work_per_task;
  const std::int64_t grain = work_per_task / work_per_item;
  return grain > 0 ? grain : 1;
}

}  // namespace strata::gpu::host::kernels::detail

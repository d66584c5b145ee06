#include "engine/memory/parallel_copy.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cstring>

#include "base/assert.h"

namespace strata::engine::memory {

void copy_in_parallel(std::span<std::byte> target, std::span<const std::byte> source) {
  STRATA_ASSERT(target.size() == source.size());
  // Blocks of 1 MiB: each thread streams, and a small copy stays on the calling thread.
  constexpr std::size_t kBlock = std::size_t{1} << 20;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, source.size(), kBlock),
                    [&](const tbb::blocked_range<std::size_t>& range) {
                      std::memcpy(target.data() + range.begin(), source.data() + range.begin(),
                                  range.size());
                    });
}

}  // namespace strata::engine::memory

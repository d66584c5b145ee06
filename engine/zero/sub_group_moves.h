#pragma once

#include <deque>
#include <exception>
#include <utility>

#include "engine/memory/pinned_pool.h"
#include "engine/memory/residency.h"

// Shared by the optimizer states' streaming (optimizer_states.cpp) and their step
// (optimizer_offload.cpp): the bookkeeping of sub-groups moving through the pool's buffers.
namespace strata::engine::zero {

// A sub-group in flight: its pool buffer and its move.
struct InFlight {
  int sub_group = 0;
  memory::PinnedPool::Lease lease;
  memory::Residency::Move move;
};

// Waits for what is still in flight after an error (its buffers must not be reused under a
// transfer); those transfers' own errors are dropped, the first one is what is rethrown.
inline void drain_reads(memory::Residency& residency, std::deque<InFlight>& reads) {
  for (InFlight& read : reads) {
    try {
      static_cast<void>(residency.finish_read(std::move(read.move)));
    } catch (const std::exception&) {
    }
  }
  reads.clear();
}

inline void drain_writes(memory::Residency& residency, std::deque<InFlight>& writes) {
  for (InFlight& write : writes) {
    try {
      residency.finish_write(std::move(write.move));
    } catch (const std::exception&) {
    }
  }
  writes.clear();
}

}  // namespace strata::engine::zero

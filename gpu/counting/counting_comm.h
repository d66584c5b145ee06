#pragma once

#include <memory>

#include "gpu/comm.h"

namespace strata::gpu::counting {

// The Comm of one rank of a planned world of `world_size` ranks (0 <= rank < world_size): each
// collective is checked and counted (Comm::counters) like any backend's, and dropped, as a
// counting device's stream drops all work. Its buffers are a CountingDevice's.
std::unique_ptr<Comm> create_counting_comm(int world_size, int rank);

}  // namespace strata::gpu::counting

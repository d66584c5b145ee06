#pragma once

#include <memory>

#include "gpu/comm.h"

namespace strata::gpu::host {

// The Comm of a world of one process: every collective is a stream copy (or nothing, when it
// works in place), so it runs on any device, CUDA included, and gives exactly what the MPI
// backend gives with one rank. `world` must have world_size() 1 and outlive the Comm.
std::unique_ptr<Comm> create_solo_comm(World& world);

}  // namespace strata::gpu::host

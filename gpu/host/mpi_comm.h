#pragma once

#include <cstdint>
#include <memory>

#include "gpu/comm.h"

namespace strata::gpu::host {

struct MpiCommOptions {
  // The most bytes one MPI call moves per rank block. Larger collectives run as a loop of calls,
  // so that MPI's `int` counts never overflow and the reduction scratch stays bounded at
  // world_size x this many bytes. Tests set it small to exercise the loop.
  std::int64_t chunk_bytes = 8 << 20;
};

// The Comm of an MPI World on the host device: each collective runs as a host task on its stream
// (the stream's worker thread blocks in MPI while other streams keep running), on an MPI
// communicator of its own (MPI_Comm_dup of MPI_COMM_WORLD, so that concurrent Comms never mix
// their messages). Collective over the World's ranks; `world` must use MPI and outlive the Comm.
//
// all_gather and broadcast are MPI_Allgather and MPI_Bcast on bytes. reduce_scatter is an
// MPI_Alltoall that brings every rank's copy of this rank's block together, then a local
// reduction in rank order (gpu/host/detail/reduce.h); all_reduce is the same reduce-scatter over
// near-equal parts followed by an in-place MPI_Allgatherv. MPI's own reductions are never used:
// their order depends on the algorithm MPI picks (so ranks and runs could differ in the last
// bit), and MPI has no bfloat16.
std::unique_ptr<Comm> create_mpi_comm(World& world, const MpiCommOptions& options = {});

}  // namespace strata::gpu::host

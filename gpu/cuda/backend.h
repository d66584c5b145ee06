#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/error.h"
#include "gpu/comm.h"
#include "gpu/device.h"
#include "gpu/device_query.h"
#include "gpu/ops.h"
#include "gpu/process_group.h"

// The CUDA backend's entry points for gpu/backend.cpp, where open_device, create_comm, create_ops
// and plain_copy choose a backend. This header includes no CUDA header; it is only compiled in
// when STRATA_HAVE_CUDA is defined (CMake option STRATA_CUDA).
namespace strata::gpu::cuda {

// The CUDA device `options.cuda_device_index` of `inventory` (which lists at least one GPU).
// Throws UserError for an index the machine does not have, a negative budget, or a budget above
// the card's memory; CudaError when the CUDA runtime fails.
std::unique_ptr<Device> open_cuda_device(const DeviceOptions& options,
                                         const GpuInventory& inventory);

// The NCCL Comm of `world` (several ranks under MPI) for buffers of the CUDA device `device`:
// rank 0's ncclUniqueId is broadcast over MPI, then every rank joins with ncclCommInitRank.
// Collective over the World's ranks.
std::unique_ptr<Comm> create_nccl_comm(World& world, Device& device);

// The CUDA kernels and cuBLASLt products behind gpu::Ops, for a CUDA device; `options.tf32` lets
// fp32 products take TF32 inputs (gpu/ops.h).
std::unique_ptr<Ops> create_cuda_ops(Device& device, OpsOptions options);

// gpu::plain_copy on a CUDA device: cudaMemcpyAsync on cudaStreamPerThread, then its
// synchronization. Throws CudaError when the runtime fails.
void plain_copy(Device& device, void* target, const void* source, std::int64_t bytes,
                CopyKind kind);

}  // namespace strata::gpu::cuda

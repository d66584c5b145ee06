// The backend factories of gpu/: every choice between the host and the CUDA backend is made here,
// and this is the only file outside gpu/cuda/ that knows whether the build has CUDA. Declared
// with the interfaces they make: open_device, create_host_device and create_counting_device
// (gpu/open_device.h), choose_comm_backend and create_comm (gpu/comm.h), create_ops (gpu/ops.h),
// plain_copy (gpu/plain_copy.h).
#include <cstring>
#include <string>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "gpu/comm.h"
#include "gpu/counting/counting_device.h"
#include "gpu/device_query.h"
#include "gpu/host/host_device.h"
#include "gpu/host/host_ops.h"
#include "gpu/host/mpi_comm.h"
#include "gpu/host/solo_comm.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "gpu/plain_copy.h"

#ifdef STRATA_HAVE_CUDA
#include "gpu/cuda/backend.h"
#endif

namespace strata::gpu {

std::unique_ptr<Device> create_host_device(const DeviceOptions& options) {
  return std::make_unique<host::HostDevice>(options);
}

std::unique_ptr<Device> create_counting_device() {
  return std::make_unique<counting::CountingDevice>();
}

std::unique_ptr<Device> open_device(const DeviceOptions& options) {
  GpuInventory inventory = query_gpus();
  if (inventory.gpus.empty()) {
    base::logger("gpu").info("no GPU ({}): using the host device", inventory.no_gpu_reason);
    return create_host_device(options);
  }
  if (!inventory.probe_kernel_ran) {
    // A card this build has no code for (sm_80 and sm_90 only), or a driver that cannot run it.
    base::logger("gpu").warn(
        "GPU found ({}) but a test kernel did not run on it (this build has code for sm_80 and "
        "sm_90 only): using the host device",
        inventory.gpus.front().name);
    return create_host_device(options);
  }
#ifdef STRATA_HAVE_CUDA
  return cuda::open_cuda_device(options, inventory);
#else
  return create_host_device(options);  // unreachable: without CUDA query_gpus finds no GPU
#endif
}

CommBackend choose_comm_backend(bool uses_mpi, int world_size, DeviceKind kind) {
  STRATA_ASSERT(world_size >= 1);
  if (uses_mpi && kind == DeviceKind::host) return CommBackend::mpi;
  if (world_size == 1) return CommBackend::solo;
#ifdef STRATA_HAVE_CUDA
  // Several ranks on CUDA devices: a World of several ranks always runs under MPI, which carries
  // NCCL's unique id.
  return CommBackend::nccl;
#else
  // Unreachable in practice (without CUDA no device is a CUDA device), kept for the test.
  throw UserError("this job has " + std::to_string(world_size) +
                      " MPI ranks on CUDA devices, but this build of strata has no NCCL "
                      "collectives (it was built without CUDA)",
                  "build strata with -DSTRATA_CUDA=ON, or hide the GPUs from every rank "
                  "(CUDA_VISIBLE_DEVICES=) so that the ranks train on the host device");
#endif
}

std::unique_ptr<Comm> create_comm(World& world, Device& device) {
  // A plan's ranks are not a World's: its Comm is counting::create_counting_comm.
  STRATA_ASSERT(device.kind() != DeviceKind::counting);
  switch (choose_comm_backend(world.uses_mpi(), world.world_size(), device.kind())) {
    case CommBackend::mpi:
      return host::create_mpi_comm(world);
    case CommBackend::solo:
      return host::create_solo_comm(world);
    case CommBackend::nccl:
#ifdef STRATA_HAVE_CUDA
      return cuda::create_nccl_comm(world, device);
#else
      break;
#endif
  }
  STRATA_ASSERT(false);
  return nullptr;
}

std::unique_ptr<Ops> create_ops(Device& device, OpsOptions options) {
#ifdef STRATA_HAVE_CUDA
  if (device.kind() == DeviceKind::cuda) return cuda::create_cuda_ops(device, options);
#else
  static_cast<void>(options);
#endif
  // The counting device's streams drop the host kernels these ops enqueue: they run nothing.
  STRATA_ASSERT(device.kind() == DeviceKind::host || device.kind() == DeviceKind::counting);
  return host::create_host_ops();
}

void plain_copy(Device& device, void* target, const void* source, std::int64_t bytes,
                CopyKind kind) {
  STRATA_ASSERT(bytes >= 0);
  if (bytes == 0) return;
#ifdef STRATA_HAVE_CUDA
  if (device.kind() == DeviceKind::cuda) {
    cuda::plain_copy(device, target, source, bytes, kind);
    return;
  }
#endif
  if (device.kind() == DeviceKind::counting) return;  // its buffers are address space only
  STRATA_ASSERT(device.kind() == DeviceKind::host);
  (void)kind;  // on the host device every side is host memory
  std::memcpy(target, source, static_cast<std::size_t>(bytes));
}

}  // namespace strata::gpu

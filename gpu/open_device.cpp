#include "gpu/open_device.h"

#include "base/log.h"
#include "gpu/device_query.h"
#include "gpu/host/host_device.h"

#ifdef STRATA_HAVE_CUDA
#include "gpu/cuda/backend.h"
#endif

namespace strata::gpu {

std::unique_ptr<Device> create_host_device(const DeviceOptions& options) {
  return std::make_unique<host::HostDevice>(options);
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

}  // namespace strata::gpu

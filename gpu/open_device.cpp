#include "gpu/open_device.h"

#include "base/log.h"
#include "gpu/device_query.h"
#include "gpu/host/host_device.h"

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
  // Extension point for the CUDA backend (issue 8): when gpu/cuda/ provides a Device, return
  // `cuda::open_cuda_device(options, inventory)` here. Until then a machine with a GPU trains on
  // the host device, and says so.
  base::logger("gpu").warn(
      "GPU found ({}) but this build has no CUDA device backend yet: using the host device",
      inventory.gpus.front().name);
  return create_host_device(options);
}

}  // namespace strata::gpu

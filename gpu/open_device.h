#pragma once

#include <memory>

#include "gpu/device.h"

namespace strata::gpu {

// The device strata trains on: the CUDA device when this build has the CUDA backend and a usable
// GPU, else the host device (a GPU emulated on host memory). Logs one line saying which and why.
// Throws UserError when the device cannot be opened (for example pinned memory refused).
std::unique_ptr<Device> open_device(const DeviceOptions& options);

// The host device, whatever the machine has: device memory is host memory under
// `options.memory_budget_bytes`, streams are worker threads.
std::unique_ptr<Device> create_host_device(const DeviceOptions& options);

// A device that runs nothing and counts its memory, for plans (gpu/counting/counting_device.h);
// its Comm is gpu::counting::create_counting_comm.
std::unique_ptr<Device> create_counting_device();

}  // namespace strata::gpu

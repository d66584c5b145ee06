#include "gpu/device_query.h"

namespace strata::gpu {

GpuInventory query_gpus() {
  GpuInventory inventory;
  inventory.no_gpu_reason = "strata was built without CUDA (STRATA_CUDA=OFF)";
  return inventory;
}

std::string attention_backend() {
  return "strata's host kernels (built without CUDA)";
}

}  // namespace strata::gpu

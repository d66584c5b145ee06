#include "gpu/device_query.h"

namespace strata::gpu {

GpuInventory query_gpus() {
  GpuInventory inventory;
  inventory.no_gpu_reason = "strata was built without CUDA (STRATA_CUDA=OFF)";
  return inventory;
}

}  // namespace strata::gpu

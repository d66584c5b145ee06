#include "gpu/cuda/cuda_check.h"

#include <fmt/format.h>

namespace strata::gpu::cuda {

std::string describe(cudaError_t status, const char* call) {
  return fmt::format("{} failed: {} ({})", call, cudaGetErrorString(status),
                     cudaGetErrorName(status));
}

CudaError::CudaError(cudaError_t status, const std::string& call)
    : std::runtime_error(describe(status, call.c_str())), status_(status) {}

void use_device(int device_index) {
  // Cheap once the device's primary context exists (a thread-local store in the runtime); not
  // cached here, since query_gpus and NCCL may set the current device too.
  check(cudaSetDevice(device_index), "cudaSetDevice");
}

}  // namespace strata::gpu::cuda

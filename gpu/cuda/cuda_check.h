#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

// Turning CUDA runtime results into exceptions: every call the CUDA backend makes goes through
// `check`, so a failure names the call and the runtime's own words for it.
namespace strata::gpu::cuda {

// A CUDA runtime call failed. what() is "<call> failed: <cudaGetErrorString> (<cudaGetErrorName>)".
class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t status, const std::string& call);
  cudaError_t status() const noexcept { return status_; }

 private:
  cudaError_t status_;
};

// Throws CudaError unless `status` is cudaSuccess. Clears the runtime's last-error slot first, so
// that a failure handled here is not reported again by a later kernel launch check.
inline void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) [[likely]]
    return;
  (void)cudaGetLastError();
  throw CudaError(status, call);
}

// The text of a CUDA error for log lines in noexcept paths (destructors, release).
std::string describe(cudaError_t status, const char* call);

// Makes `device_index` the calling thread's current device (cudaSetDevice): the runtime's current
// device is per thread, and any thread may enqueue on this backend's streams.
void use_device(int device_index);

}  // namespace strata::gpu::cuda

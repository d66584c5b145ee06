#include <cuda_runtime.h>

#include "gpu/cuda/probe.h"

namespace strata::gpu::cuda {
namespace {

__global__ void write_indices(int* out, int count) {
  int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < count) out[i] = i * 3 + 1;
}

}  // namespace

bool run_probe_kernel() noexcept {
  constexpr int kCount = 256;
  int* device = nullptr;
  if (cudaMalloc(&device, kCount * sizeof(int)) != cudaSuccess) return false;
  write_indices<<<1, kCount>>>(device, kCount);
  int host[kCount] = {};
  bool ok = cudaGetLastError() == cudaSuccess &&
            cudaMemcpy(host, device, sizeof(host), cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(device);
  for (int i = 0; ok && i < kCount; ++i)
    ok = host[i] == i * 3 + 1;
  return ok;
}

}  // namespace strata::gpu::cuda

#include <cuda_runtime.h>
#include <nccl.h>

#include <fmt/format.h>

#include <exception>
#include <string>

#include "gpu/cuda/probe.h"
#if STRATA_HAVE_CUDNN
#include "gpu/cuda/cudnn_library.h"
#endif
#include "gpu/device_query.h"

namespace strata::gpu {
namespace {

std::string cuda_version_text(int version) {
  return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

}  // namespace

GpuInventory query_gpus() {
  GpuInventory inventory;
  inventory.cuda_built = true;
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) {
    inventory.cuda_runtime_version = cuda_version_text(runtime);
  }
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    inventory.nccl_version =
        fmt::format("{}.{}.{}", nccl / 10000, (nccl % 10000) / 100, nccl % 100);
  }
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) {
    inventory.cuda_driver_version = cuda_version_text(driver);
  }
  // Without a driver this fails with "CUDA driver version is insufficient": that is "no GPU".
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    inventory.no_gpu_reason = cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return inventory;
  }
  if (count == 0) {
    inventory.no_gpu_reason = "the CUDA runtime sees no GPU";
    return inventory;
  }
  for (int index = 0; index < count; ++index) {
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, index) != cudaSuccess) continue;
    GpuInfo info;
    info.index = index;
    info.name = props.name;
    info.memory_bytes = static_cast<std::int64_t>(props.totalGlobalMem);
    info.compute_capability_major = props.major;
    info.compute_capability_minor = props.minor;
    info.multiprocessor_count = props.multiProcessorCount;
    char bus_id[32] = {};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), index) == cudaSuccess)
      info.pci_bus_id = bus_id;
    inventory.gpus.push_back(std::move(info));
  }
  if (!inventory.gpus.empty() && cudaSetDevice(0) == cudaSuccess) {
    inventory.probe_kernel_ran = cuda::run_probe_kernel();
  }
  return inventory;
}

std::string attention_backend() {
#if STRATA_HAVE_CUDNN
  try {
    return "cuDNN's fused attention where it builds a plan for the shape (" +
           cuda::cudnn_description() + "), else strata's kernels";
  } catch (const std::exception& error) {
    return std::string("strata's kernels: cuDNN is not usable: ") + error.what();
  }
#else
  return "strata's kernels (built without cuDNN's headers)";
#endif
}

}  // namespace strata::gpu

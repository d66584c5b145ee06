#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::gpu {

// One GPU as the CUDA runtime sees it.
struct GpuInfo {
  int index = 0;
  std::string name;
  std::int64_t memory_bytes = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int multiprocessor_count = 0;
  std::string pci_bus_id;
};

// What this machine offers for GPU work. `gpus` is empty when there is no usable GPU, and then
// `no_gpu_reason` says why in words ("built without CUDA", "CUDA driver version is
// insufficient for CUDA runtime version", ...).
struct GpuInventory {
  bool cuda_built = false;
  std::vector<GpuInfo> gpus;
  std::string cuda_runtime_version;  // "13.0", or empty
  std::string cuda_driver_version;   // the newest CUDA the driver supports, or empty
  std::string nccl_version;          // "2.28.3", or empty
  bool probe_kernel_ran = false;     // a tiny kernel ran on GPU 0 and returned the right answer
  std::string no_gpu_reason;
};

// Asks the CUDA runtime. Never throws: any CUDA error means "no GPU", with the error's text.
GpuInventory query_gpus();

// What CUDA's attention runs on here, in words: cuDNN's fused attention and the library loaded
// for it (where it builds a plan for the shape), or strata's own kernels and why. Loads cuDNN if
// the build has it, so only `strata report` asks. Never throws.
std::string attention_backend();

}  // namespace strata::gpu

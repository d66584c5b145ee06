#include "bench/bench_device.h"

#include "base/assert.h"
#include "base/error.h"
#include "gpu/device_query.h"
#include "gpu/open_device.h"

namespace strata::tools {

gpu::DataType parse_bench_dtype(const std::string& name) {
  for (gpu::DataType type :
       {gpu::DataType::float32, gpu::DataType::bfloat16, gpu::DataType::float16}) {
    if (gpu::to_string(type) == name) return type;
  }
  throw UserError("--dtype " + name + " is not float32, bfloat16 or float16",
                  "give --dtype bfloat16 (a bf16 config's compute type), float16 or float32", 2);
}

gpu::DeviceKind parse_bench_device(const std::string& name) {
  if (name == "host") return gpu::DeviceKind::host;
  if (name == "cuda") return gpu::DeviceKind::cuda;
  throw UserError("--device " + name + " is not host or cuda",
                  "give --device cuda (the GPU) or --device host (the host backend)", 2);
}

std::unique_ptr<gpu::Device> open_bench_cuda_device(std::int64_t budget_bytes) {
  const gpu::GpuInventory inventory = gpu::query_gpus();
  const std::string fix = "pass --device host to measure the host backend instead";
  if (!inventory.cuda_built) {
    throw UserError("--device cuda: this strata was built without the CUDA backend",
                    "build it where the CUDA toolkit's nvcc is on PATH (cmake --preset release "
                    "-DSTRATA_CUDA=ON), or " +
                        fix,
                    2);
  }
  if (inventory.gpus.empty()) {
    throw UserError("--device cuda found no GPU: " + inventory.no_gpu_reason,
                    "run it on a machine with an NVIDIA GPU (`strata report` shows what CUDA "
                    "sees), or " +
                        fix,
                    2);
  }
  if (!inventory.probe_kernel_ran) {
    throw UserError("--device cuda: the GPU found (" + inventory.gpus.front().name +
                        ") did not run a test kernel (this build has code for sm_80 and sm_90 "
                        "only)",
                    "run it on an A100, H100 or H200, or " + fix, 2);
  }
  gpu::DeviceOptions options;
  options.memory_budget_bytes = budget_bytes;
  std::unique_ptr<gpu::Device> device = gpu::open_device(options);
  STRATA_ASSERT(device->kind() == gpu::DeviceKind::cuda);
  return device;
}

std::unique_ptr<gpu::Device> open_bench_device(gpu::DeviceKind kind, std::int64_t budget_bytes) {
  if (kind == gpu::DeviceKind::cuda) return open_bench_cuda_device(budget_bytes);
  gpu::DeviceOptions options;
  options.memory_budget_bytes = budget_bytes;
  return gpu::create_host_device(options);
}

}  // namespace strata::tools

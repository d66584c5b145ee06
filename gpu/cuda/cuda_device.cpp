#include "gpu/cuda/cuda_device.h"

#include <fmt/format.h>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "base/units.h"
#include "gpu/cuda/backend.h"
#include "gpu/cuda/cuda_check.h"

namespace strata::gpu::cuda {

CudaDevice::CudaDevice(const GpuInfo& gpu, std::int64_t budget_bytes)
    : index_(gpu.index),
      name_(gpu.name),
      memory_(gpu.index, gpu.name, budget_bytes),
      pinned_(gpu.name) {
  compute_ = std::make_unique<CudaStream>("compute", index_, counters_, nullptr);
  h2d_ = std::make_unique<CudaStream>("h2d", index_, counters_, nullptr);
  d2h_ = std::make_unique<CudaStream>("d2h", index_, counters_, nullptr);
  base::logger("gpu").info("cuda device opened: index={} name=\"{}\" sm={}.{} budget={}", index_,
                           name_, gpu.compute_capability_major, gpu.compute_capability_minor,
                           base::format_bytes(static_cast<double>(budget_bytes)));
}

CudaDevice::~CudaDevice() {
  compute_.reset();
  h2d_.reset();
  d2h_.reset();
  expect_no_created_streams();
}

DeviceBuffer CudaDevice::allocate(std::int64_t bytes, std::string_view what) {
  return memory_.allocate(bytes, what);
}

PinnedBuffer CudaDevice::allocate_pinned(std::int64_t bytes) {
  return pinned_.allocate(bytes);
}

std::unique_ptr<Stream> CudaDevice::create_stream(std::string_view name) {
  StreamRegistry* registry = this;
  return std::make_unique<CudaStream>(std::string(name), index_, counters_, registry);
}

std::unique_ptr<Event> CudaDevice::create_event() {
  return std::make_unique<CudaEvent>(index_);
}

void CudaDevice::add(CudaStream* stream) {
  add_created_stream(*stream);
}

void CudaDevice::remove(CudaStream* stream) noexcept {
  remove_created_stream(*stream);
}

CudaDevice& as_cuda_device(Device& device) {
  auto* cuda_device = dynamic_cast<CudaDevice*>(&device);
  STRATA_ASSERT(cuda_device != nullptr);
  return *cuda_device;
}

void plain_copy(Device& device, void* target, const void* source, std::int64_t bytes,
                CopyKind kind) {
  use_device(as_cuda_device(device).index());
  cudaMemcpyKind cuda_kind = kind == CopyKind::host_to_device     ? cudaMemcpyHostToDevice
                             : kind == CopyKind::device_to_host   ? cudaMemcpyDeviceToHost
                             : kind == CopyKind::device_to_device ? cudaMemcpyDeviceToDevice
                                                                  : cudaMemcpyHostToHost;
  check(cudaMemcpyAsync(target, source, static_cast<std::size_t>(bytes), cuda_kind,
                        cudaStreamPerThread),
        "cudaMemcpyAsync");
  check(cudaStreamSynchronize(cudaStreamPerThread), "cudaStreamSynchronize");
}

std::unique_ptr<Device> open_cuda_device(const DeviceOptions& options,
                                         const GpuInventory& inventory) {
  STRATA_ASSERT(!inventory.gpus.empty());
  const auto count = static_cast<int>(inventory.gpus.size());
  if (options.cuda_device_index < 0 || options.cuda_device_index >= count) {
    throw UserError(fmt::format("CUDA device {} was asked for, but this machine has {} GPU(s) "
                                "(indices 0 to {})",
                                options.cuda_device_index, count, count - 1),
                    "pick an index below the GPU count, or set CUDA_VISIBLE_DEVICES to the GPUs "
                    "this job may use");
  }
  const GpuInfo& gpu = inventory.gpus[static_cast<std::size_t>(options.cuda_device_index)];
  if (options.memory_budget_bytes < 0) {
    throw UserError(fmt::format("strata.device_memory_budget is {} bytes: it must be positive",
                                options.memory_budget_bytes),
                    "set strata.device_memory_budget to a byte count such as 4294967296 or "
                    "\"4G\", or leave it out for the device's own size",
                    2);
  }
  if (options.memory_budget_bytes > gpu.memory_bytes) {
    throw UserError(
        fmt::format("strata.device_memory_budget is {} ({} bytes), more than the {} of {}",
                    base::format_bytes(static_cast<double>(options.memory_budget_bytes)),
                    options.memory_budget_bytes,
                    base::format_bytes(static_cast<double>(gpu.memory_bytes)), gpu.name),
        "set strata.device_memory_budget below the card's memory, or leave it out for the "
        "card's own size",
        2);
  }
  std::int64_t budget =
      options.memory_budget_bytes == 0 ? gpu.memory_bytes : options.memory_budget_bytes;
  return std::make_unique<CudaDevice>(gpu, budget);
}

}  // namespace strata::gpu::cuda

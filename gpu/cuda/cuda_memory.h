#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "base/error.h"
#include "gpu/device_buffer.h"
#include "gpu/memory_ledger.h"

namespace strata::gpu::cuda {

// Device memory of one GPU under a byte budget, from a dedicated stream-ordered memory pool
// (cudaMemPoolCreate): allocations are cudaMallocFromPoolAsync and frees cudaFreeAsync, both on
// a private stream that carries nothing else. An allocation synchronizes that private stream, so
// the pointer is valid on every stream at once (as cudaMalloc's is) without the device-wide
// synchronization that cudaFree would cost; a free returns at once, and the pool reuses the
// memory in the private stream's order. Accounting is exact (the sizes asked for), as on the
// host backend, in the same MemoryLedger, whose refusal is gpu::budget_exceeded_error.
class CudaMemory final : public detail::AllocationOwner {
 public:
  CudaMemory(int device_index, std::string device_name, std::int64_t budget_bytes);
  // Asserts that no allocation is live, waits for the pending frees, destroys the pool.
  ~CudaMemory() override;
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;

  // See Device::allocate: 256-byte aligned, over budget is a UserError naming
  // strata.device_memory_budget; a card out of memory below the budget is a UserError too.
  DeviceBuffer allocate(std::int64_t bytes, std::string_view what);
  void release(void* data, std::int64_t bytes) noexcept override;

  std::int64_t budget_bytes() const noexcept { return ledger_.budget_bytes(); }
  std::int64_t bytes_in_use() const { return ledger_.bytes_in_use(); }
  std::int64_t peak_bytes_in_use() const { return ledger_.peak_bytes_in_use(); }
  void reset_peak() { ledger_.reset_peak(); }

 private:
  int device_index_;
  std::string device_name_;
  MemoryLedger ledger_;
  cudaMemPool_t pool_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// Page-locked host memory from cudaHostAlloc (portable: usable with every device), 4 KiB aligned,
// accounted in locked bytes (whole 4 KiB pages) as on the host backend.
class CudaPinnedMemory final : public detail::AllocationOwner {
 public:
  static constexpr std::int64_t alignment_bytes = 4096;

  explicit CudaPinnedMemory(std::string device_name);
  ~CudaPinnedMemory() override;
  CudaPinnedMemory(const CudaPinnedMemory&) = delete;
  CudaPinnedMemory& operator=(const CudaPinnedMemory&) = delete;

  // See Device::allocate_pinned. A refusal (cudaErrorMemoryAllocation) is
  // gpu::pinned_memory_refused (gpu/pinned_limit.h).
  PinnedBuffer allocate(std::int64_t bytes);
  void release(void* data, std::int64_t bytes) noexcept override;

  std::int64_t bytes_in_use() const { return ledger_.bytes_in_use(); }

 private:
  std::string device_name_;
  MemoryLedger ledger_;  // locked bytes
};

}  // namespace strata::gpu::cuda

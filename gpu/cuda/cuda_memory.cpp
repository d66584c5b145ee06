#include "gpu/cuda/cuda_memory.h"

#include <fmt/format.h>

#include <limits>

#include "base/assert.h"
#include "base/log.h"
#include "base/round_up.h"
#include "base/units.h"
#include "gpu/cuda/backend.h"
#include "gpu/cuda/cuda_check.h"
#include "gpu/pinned_limit.h"

namespace strata::gpu::cuda {
namespace {

// cudaMalloc's alignment; sizes are rounded up to it so that every block the pool carves starts
// on a 256-byte boundary.
constexpr std::int64_t device_alignment_bytes = 256;

}  // namespace

CudaMemory::CudaMemory(int device_index, std::string device_name, std::int64_t budget_bytes)
    : device_index_(device_index),
      device_name_(device_name),
      ledger_(std::move(device_name), LedgerKind::device, budget_bytes) {
  use_device(device_index_);
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device_index_;
  check(cudaMemPoolCreate(&pool_, &props), "cudaMemPoolCreate");
  // Keep freed memory in the pool instead of giving it back to the driver at every
  // synchronization: the budget, not the pool, bounds what strata holds.
  auto keep = std::numeric_limits<std::uint64_t>::max();
  check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep),
        "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)");
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}

CudaMemory::~CudaMemory() {
  // (The ledger reports and asserts buffers still live after the pool is gone.)
  cudaError_t status = cudaSetDevice(device_index_);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream_);
  if (status == cudaSuccess) status = cudaStreamDestroy(stream_);
  if (status == cudaSuccess) status = cudaMemPoolDestroy(pool_);
  if (status != cudaSuccess) {
    base::logger("gpu").error("device memory pool teardown: {}",
                              describe(status, "cudaMemPoolDestroy"));
  }
}

DeviceBuffer CudaMemory::allocate(std::int64_t bytes, std::string_view what) {
  STRATA_ASSERT(bytes >= 0);
  if (bytes == 0) return DeviceBuffer();
  ledger_.add(bytes, what);
  auto unreserve = [&] { ledger_.remove(bytes); };
  void* data = nullptr;
  cudaError_t status = cudaSetDevice(device_index_);
  if (status == cudaSuccess) {
    status = cudaMallocFromPoolAsync(
        &data, static_cast<std::size_t>(base::round_up(bytes, device_alignment_bytes)), pool_,
        stream_);
  }
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream_);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    unreserve();
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    throw UserError(
        fmt::format("{} has no room for {} ({} bytes) for {}, although the device memory budget "
                    "of {} allows it: the card has {} free of {}",
                    device_name_, base::format_bytes(static_cast<double>(bytes)), bytes, what,
                    base::format_bytes(static_cast<double>(budget_bytes())),
                    base::format_bytes(static_cast<double>(free_bytes)),
                    base::format_bytes(static_cast<double>(total_bytes))),
        "lower strata.device_memory_budget in the config to what the card can hold (leave room "
        "for cuBLAS and NCCL), or stop other processes that use this GPU");
  }
  if (status != cudaSuccess) {
    unreserve();
    check(status, "cudaMallocFromPoolAsync");
  }
  // The pool hands out blocks of whole 256-byte multiples; the contract promises the alignment.
  STRATA_ASSERT(reinterpret_cast<std::uintptr_t>(data) % device_alignment_bytes == 0);
  return DeviceBuffer(data, bytes, this);
}

void CudaMemory::release(void* data, std::int64_t bytes) noexcept {
  // Stream-ordered on the private stream: the caller has already made sure no queued work on any
  // stream still touches the buffer (the DeviceBuffer contract), so the pool may reuse it for the
  // next allocation, which is ordered after this free on the same stream.
  cudaError_t status = cudaSetDevice(device_index_);
  if (status == cudaSuccess) status = cudaFreeAsync(data, stream_);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    base::logger("gpu").error("{}: freeing device memory: {}", device_name_,
                              describe(status, "cudaFreeAsync"));
  }
  ledger_.remove(bytes);
}

CudaPinnedMemory::CudaPinnedMemory(std::string device_name)
    : device_name_(device_name), ledger_(std::move(device_name), LedgerKind::pinned) {}

CudaPinnedMemory::~CudaPinnedMemory() = default;

PinnedBuffer CudaPinnedMemory::allocate(std::int64_t bytes) {
  STRATA_ASSERT(bytes >= 0);
  if (bytes == 0) return PinnedBuffer();
  std::int64_t locked = base::round_up(bytes, alignment_bytes);
  void* data = nullptr;
  cudaError_t status =
      cudaHostAlloc(&data, static_cast<std::size_t>(locked), cudaHostAllocPortable);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    std::string text = describe(status, "cudaHostAlloc");
    if (status == cudaErrorMemoryAllocation) {
      throw pinned_memory_refused(bytes, text, pinned_limit(), bytes_in_use());
    }
    throw CudaError(status, "cudaHostAlloc");
  }
  // cudaHostAlloc maps whole pages, so the block starts on a page.
  STRATA_ASSERT(reinterpret_cast<std::uintptr_t>(data) % alignment_bytes == 0);
  ledger_.add(locked, "pinned memory");
  return PinnedBuffer(data, bytes, this);
}

void CudaPinnedMemory::release(void* data, std::int64_t bytes) noexcept {
  cudaError_t status = cudaFreeHost(data);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    base::logger("gpu").error("{}: freeing pinned memory: {}", device_name_,
                              describe(status, "cudaFreeHost"));
  }
  ledger_.remove(base::round_up(bytes, alignment_bytes));
}

}  // namespace strata::gpu::cuda

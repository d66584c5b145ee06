#pragma once

#include <cstdint>
#include <string>

#include "base/error.h"
#include "gpu/device_buffer.h"
#include "gpu/memory_ledger.h"
#include "gpu/pinned_limit.h"

namespace strata::gpu::host {

// Page-locked host memory for the host backend: 4 KiB-aligned allocations locked with mlock(2),
// so they behave as cudaHostAlloc memory does (never swapped out, counted against
// RLIMIT_MEMLOCK). Accounting is in locked bytes, each allocation rounded up to whole pages.
class HostPinnedMemory final : public detail::AllocationOwner {
 public:
  static constexpr std::int64_t alignment_bytes = 4096;

  explicit HostPinnedMemory(std::string device_name);
  // Asserts that no allocation is live.
  ~HostPinnedMemory() override;
  HostPinnedMemory(const HostPinnedMemory&) = delete;
  HostPinnedMemory& operator=(const HostPinnedMemory&) = delete;

  // See Device::allocate_pinned.
  PinnedBuffer allocate(std::int64_t bytes);
  void release(void* data, std::int64_t bytes) noexcept override;

  std::int64_t bytes_in_use() const { return ledger_.bytes_in_use(); }

 private:
  MemoryLedger ledger_;  // locked bytes
};

// The error for an mlock the operating system refused (exposed for its test). `error_number` is
// mlock's errno; `limit` what the process may lock (gpu::pinned_limit());
// `held_bytes` what this device already holds locked.
UserError pinned_lock_error(std::int64_t asked_bytes, int error_number, const PinnedLimit& limit,
                            std::int64_t held_bytes);

}  // namespace strata::gpu::host

#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "base/error.h"
#include "gpu/device_buffer.h"
#include "gpu/memory_ledger.h"

namespace strata::gpu::host {

// Whether this build checks device pointers and poisons device memory: debug builds only
// (NDEBUG undefined), as the checks take a lock and a map lookup per copy.
#ifdef NDEBUG
inline constexpr bool checks_device_pointers = false;
#else
inline constexpr bool checks_device_pointers = true;
#endif

// The byte every device allocation is filled with on allocation and on free in debug builds:
// 0xFF bytes read as NaN in fp32, bf16 and fp16, so a read of memory nobody wrote (garbage on a
// real GPU) or of freed memory shows up as NaN instead of the zeros fresh host pages hold.
inline constexpr unsigned char device_poison_byte = 0xFF;

// The host backend's device memory: host memory under a byte budget. Accounting is exact (the
// sizes asked for); in debug builds every live allocation is also kept in an address map so
// that streams can check the pointers they are given (`check_live`).
class HostMemory final : public detail::AllocationOwner {
 public:
  // `device_name` appears in messages; `budget_bytes` > 0.
  HostMemory(std::string device_name, std::int64_t budget_bytes);
  // Asserts that no allocation is live: a buffer that outlived its device would free into a
  // destroyed object.
  ~HostMemory() override;
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  // See Device::allocate. Aligned to 256 bytes, as cudaMalloc.
  DeviceBuffer allocate(std::int64_t bytes, std::string_view what);
  void release(void* data, std::int64_t bytes) noexcept override;

  std::int64_t budget_bytes() const noexcept { return ledger_.budget_bytes(); }
  std::int64_t bytes_in_use() const { return ledger_.bytes_in_use(); }
  std::int64_t peak_bytes_in_use() const { return ledger_.peak_bytes_in_use(); }
  void reset_peak() { ledger_.reset_peak(); }

  // Debug builds: aborts with a message naming `pointer`, `role` ("copy target") and `stream`
  // unless [pointer, pointer + bytes) lies inside one live allocation of this device. Release
  // builds: does nothing. `bytes` 0 is never checked.
  void check_live(const void* pointer, std::int64_t bytes, std::string_view role,
                  std::string_view stream) const noexcept;

 private:
  std::string device_name_;
  MemoryLedger ledger_;
  // Debug builds only: start address -> size of each live allocation.
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::int64_t> live_;
};

}  // namespace strata::gpu::host

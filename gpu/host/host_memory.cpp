#include "gpu/host/host_memory.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <utility>

#include "base/assert.h"
#include "base/round_up.h"
#include "base/units.h"

namespace strata::gpu::host {
namespace {

// cudaMalloc returns 256-byte aligned memory; kernels and vector loads may rely on it.
constexpr std::int64_t device_alignment_bytes = 256;

}  // namespace

HostMemory::HostMemory(std::string device_name, std::int64_t budget_bytes)
    : device_name_(device_name),
      ledger_(std::move(device_name), LedgerKind::device, budget_bytes) {}

HostMemory::~HostMemory() = default;

DeviceBuffer HostMemory::allocate(std::int64_t bytes, std::string_view what) {
  STRATA_ASSERT(bytes >= 0);
  if (bytes == 0) return DeviceBuffer();
  ledger_.add(bytes, what);
  std::int64_t rounded = base::round_up(bytes, device_alignment_bytes);
  void* data = std::aligned_alloc(device_alignment_bytes, static_cast<std::size_t>(rounded));
  if (data == nullptr) {
    ledger_.remove(bytes);
    throw UserError(
        fmt::format("the host device could not get {} of host memory for {} (the budget allows "
                    "it, but the machine's memory does not)",
                    base::format_bytes(static_cast<double>(bytes)), what),
        "lower strata.device_memory_budget in the config to what this machine's free RAM can hold");
  }
  if constexpr (checks_device_pointers) {
    std::memset(data, device_poison_byte, static_cast<std::size_t>(rounded));
    std::lock_guard lock(mutex_);
    live_.emplace(reinterpret_cast<std::uintptr_t>(data), bytes);
  }
  return DeviceBuffer(data, bytes, this);
}

void HostMemory::release(void* data, std::int64_t bytes) noexcept {
  if constexpr (checks_device_pointers) {
    {
      std::lock_guard lock(mutex_);
      auto erased = live_.erase(reinterpret_cast<std::uintptr_t>(data));
      STRATA_ASSERT(erased == 1);
    }
    // After the erase, so a stream that checks this range now aborts instead of reading poison.
    std::memset(data, device_poison_byte,
                static_cast<std::size_t>(base::round_up(bytes, device_alignment_bytes)));
  }
  std::free(data);
  ledger_.remove(bytes);
}

void HostMemory::check_live(const void* pointer, std::int64_t bytes, std::string_view role,
                            std::string_view stream) const noexcept {
  if constexpr (!checks_device_pointers) return;
  if (bytes == 0) return;
  auto address = reinterpret_cast<std::uintptr_t>(pointer);
  {
    std::lock_guard lock(mutex_);
    // The last allocation starting at or before `address` is the only one that can hold it.
    auto after = live_.upper_bound(address);
    if (after != live_.begin()) {
      auto holder = std::prev(after);
      auto end = holder->first + static_cast<std::uintptr_t>(holder->second);
      if (address + static_cast<std::uintptr_t>(bytes) <= end) return;
    }
  }
  std::fprintf(stderr,
               "strata: %s: %.*s pointer %p (%lld bytes) on stream '%.*s' is not inside a live "
               "device allocation: device memory used after it was freed, a range past the end "
               "of its buffer, or host memory passed with the wrong CopyKind\n",
               device_name_.c_str(), static_cast<int>(role.size()), role.data(), pointer,
               static_cast<long long>(bytes), static_cast<int>(stream.size()), stream.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace strata::gpu::host

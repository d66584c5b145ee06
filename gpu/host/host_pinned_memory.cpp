#include "gpu/host/host_pinned_memory.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/assert.h"
#include "base/round_up.h"
#include "base/units.h"
#include "gpu/pinned_limit.h"

namespace strata::gpu::host {
UserError pinned_lock_error(std::int64_t asked_bytes, int error_number, const PinnedLimit& limit,
                            std::int64_t held_bytes) {
  return pinned_memory_refused(
      asked_bytes,
      fmt::format("mlock failed with {} ({})", error_number == EPERM ? "EPERM" : "ENOMEM",
                  std::strerror(error_number)),
      limit, held_bytes);
}

HostPinnedMemory::HostPinnedMemory(std::string device_name)
    : ledger_(std::move(device_name), LedgerKind::pinned) {}

HostPinnedMemory::~HostPinnedMemory() = default;

PinnedBuffer HostPinnedMemory::allocate(std::int64_t bytes) {
  STRATA_ASSERT(bytes >= 0);
  if (bytes == 0) return PinnedBuffer();
  std::int64_t locked = base::round_up(bytes, alignment_bytes);
  void* data = std::aligned_alloc(alignment_bytes, static_cast<std::size_t>(locked));
  if (data == nullptr) {
    throw UserError(fmt::format("could not allocate {} of pinned host memory: the machine is out "
                                "of memory",
                                base::format_bytes(static_cast<double>(bytes))),
                    "pin less: lower buffer_count or buffer_size in offload_param / "
                    "offload_optimizer, or free memory on this machine");
  }
  // mlock faults every page in and keeps it resident, as cudaHostAlloc does.
  if (mlock(data, static_cast<std::size_t>(locked)) != 0) {
    int error_number = errno;
    std::free(data);
    std::int64_t held = bytes_in_use();
    if (error_number == ENOMEM || error_number == EPERM || error_number == EAGAIN) {
      throw pinned_lock_error(bytes, error_number == EAGAIN ? ENOMEM : error_number, pinned_limit(),
                              held);
    }
    throw UserError(
        fmt::format("could not lock {} of pinned host memory: mlock failed: {}",
                    base::format_bytes(static_cast<double>(bytes)), std::strerror(error_number)),
        "check the locked-memory limit (`ulimit -l`) and free memory");
  }
  ledger_.add(locked, "pinned memory");
  return PinnedBuffer(data, bytes, this);
}

void HostPinnedMemory::release(void* data, std::int64_t bytes) noexcept {
  std::int64_t locked = base::round_up(bytes, alignment_bytes);
  // munlock cannot fail for a range we locked; free unlocks anyway when the pages go back.
  munlock(data, static_cast<std::size_t>(locked));
  std::free(data);
  ledger_.remove(locked);
}

}  // namespace strata::gpu::host

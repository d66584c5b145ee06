#include "gpu/host/host_pinned_memory.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/assert.h"
#include "base/units.h"

namespace strata::gpu::host {
namespace {

std::int64_t round_up_to_pages(std::int64_t bytes) {
  return (bytes + HostPinnedMemory::alignment_bytes - 1) / HostPinnedMemory::alignment_bytes *
         HostPinnedMemory::alignment_bytes;
}

// The soft RLIMIT_MEMLOCK in bytes, or -1 when unlimited or unknown.
std::int64_t memlock_limit_bytes() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return -1;
  return static_cast<std::int64_t>(limit.rlim_cur);
}

std::string describe_limit(std::int64_t limit_bytes) {
  if (limit_bytes < 0) return "unlimited";
  return fmt::format("{} ({} KiB, as `ulimit -l` shows it)",
                     base::format_bytes(static_cast<double>(limit_bytes)), limit_bytes / 1024);
}

}  // namespace

UserError pinned_lock_error(std::int64_t asked_bytes, int error_number, std::int64_t limit_bytes,
                            std::int64_t held_bytes) {
  std::int64_t needed_kib = (held_bytes + asked_bytes + 1023) / 1024;
  return UserError(
      fmt::format("could not lock {} ({} bytes) of pinned host memory: mlock failed with {} ({}); "
                  "the locked-memory limit (RLIMIT_MEMLOCK) is {} and this device already holds "
                  "{} locked",
                  base::format_bytes(static_cast<double>(asked_bytes)), asked_bytes,
                  error_number == EPERM ? "EPERM" : "ENOMEM", std::strerror(error_number),
                  describe_limit(limit_bytes), base::format_bytes(static_cast<double>(held_bytes))),
      fmt::format("raise the locked-memory limit to at least {} KiB: run `ulimit -l unlimited` (or "
                  "`ulimit -l {}`) in the shell that starts strata; to make it permanent for a "
                  "user, add `<user> - memlock unlimited` to /etc/security/limits.conf and log in "
                  "again; in a container, start it with `--ulimit memlock=-1:-1` (docker/podman). "
                  "Or pin less: lower buffer_count or buffer_size in offload_param / "
                  "offload_optimizer",
                  needed_kib, needed_kib));
}

HostPinnedMemory::HostPinnedMemory(std::string device_name)
    : device_name_(std::move(device_name)) {}

HostPinnedMemory::~HostPinnedMemory() {
  std::lock_guard lock(mutex_);
  if (live_count_ != 0) {
    std::fprintf(stderr,
                 "strata: %s destroyed while %lld pinned buffers (%lld bytes) are still live: "
                 "destroy every PinnedBuffer before its device\n",
                 device_name_.c_str(), static_cast<long long>(live_count_),
                 static_cast<long long>(locked_bytes_));
  }
  STRATA_ASSERT(live_count_ == 0);
}

PinnedBuffer HostPinnedMemory::allocate(std::int64_t bytes) {
  STRATA_ASSERT(bytes >= 0);
  if (bytes == 0) return PinnedBuffer();
  std::int64_t locked = round_up_to_pages(bytes);
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
      throw pinned_lock_error(bytes, error_number == EAGAIN ? ENOMEM : error_number,
                              memlock_limit_bytes(), held);
    }
    throw UserError(
        fmt::format("could not lock {} of pinned host memory: mlock failed: {}",
                    base::format_bytes(static_cast<double>(bytes)), std::strerror(error_number)),
        "check the locked-memory limit (`ulimit -l`) and free memory");
  }
  std::lock_guard lock(mutex_);
  locked_bytes_ += locked;
  live_count_ += 1;
  return PinnedBuffer(data, bytes, this);
}

void HostPinnedMemory::release(void* data, std::int64_t bytes) noexcept {
  std::int64_t locked = round_up_to_pages(bytes);
  // munlock cannot fail for a range we locked; free unlocks anyway when the pages go back.
  munlock(data, static_cast<std::size_t>(locked));
  std::free(data);
  std::lock_guard lock(mutex_);
  STRATA_ASSERT(locked_bytes_ >= locked);
  STRATA_ASSERT(live_count_ > 0);
  locked_bytes_ -= locked;
  live_count_ -= 1;
}

std::int64_t HostPinnedMemory::bytes_in_use() const {
  std::lock_guard lock(mutex_);
  return locked_bytes_;
}

}  // namespace strata::gpu::host

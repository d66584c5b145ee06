#include "gpu/pinned_limit.h"

#include <fmt/format.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/units.h"

namespace strata::gpu {
namespace {

std::string bytes_text(std::int64_t bytes) {
  return base::format_bytes(static_cast<double>(bytes));
}

// Whether CAP_IPC_LOCK is in this thread's effective set. glibc has no capget wrapper and libcap
// is not a dependency, so the system call is made directly with the version 3 layout (two
// 32-bit words per set).
bool has_cap_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective & CAP_TO_MASK(CAP_IPC_LOCK)) != 0;
}

}  // namespace

std::optional<std::int64_t> PinnedLimit::lockable_bytes() const {
  if (cap_ipc_lock) return std::nullopt;
  return rlimit_bytes;
}

bool PinnedLimit::allows(std::int64_t held_bytes, std::int64_t asked_bytes) const {
  const std::optional<std::int64_t> lockable = lockable_bytes();
  return !lockable || held_bytes + asked_bytes <= *lockable;
}

std::string PinnedLimit::describe() const {
  if (!rlimit_bytes) return "unlimited";
  if (cap_ipc_lock) {
    return fmt::format("unlimited (RLIMIT_MEMLOCK {}, lifted by CAP_IPC_LOCK)",
                       bytes_text(*rlimit_bytes));
  }
  return fmt::format("{} (RLIMIT_MEMLOCK, {} KiB as `ulimit -l` shows it; no CAP_IPC_LOCK)",
                     bytes_text(*rlimit_bytes), *rlimit_bytes / 1024);
}

PinnedLimit pinned_limit() {
  PinnedLimit limit;
  rlimit memlock{};
  if (::getrlimit(RLIMIT_MEMLOCK, &memlock) == 0 && memlock.rlim_cur != RLIM_INFINITY)
    limit.rlimit_bytes = static_cast<std::int64_t>(memlock.rlim_cur);
  limit.cap_ipc_lock = has_cap_ipc_lock();
  return limit;
}

std::string raise_pinned_limit_fix(std::int64_t needed_bytes) {
  const std::int64_t kib = (needed_bytes + 1023) / 1024;
  return fmt::format(
      "raise the locked-memory limit to at least {} KiB: run `ulimit -l unlimited` (or `ulimit -l "
      "{}`) in the shell that starts strata; to make it permanent for a user, add `<user> - "
      "memlock unlimited` to /etc/security/limits.conf and log in again; in a container, start it "
      "with `--ulimit memlock=-1:-1` (docker/podman). Or run strata with CAP_IPC_LOCK, which lifts "
      "the limit (`--cap-add IPC_LOCK` for a container)",
      kib, kib);
}

UserError pinned_memory_refused(std::int64_t asked_bytes, const std::string& refusal,
                                const PinnedLimit& limit, std::int64_t held_bytes) {
  return UserError(
      fmt::format("could not lock {} ({} bytes) of pinned host memory: {}; this process may lock "
                  "{} and this device already holds {} locked",
                  bytes_text(asked_bytes), asked_bytes, refusal, limit.describe(),
                  bytes_text(held_bytes)),
      fmt::format("{}. Or pin less: set pin_memory to false in offload_param / "
                  "offload_optimizer, or lower their buffer_count or buffer_size",
                  raise_pinned_limit_fix(held_bytes + asked_bytes)));
}

}  // namespace strata::gpu

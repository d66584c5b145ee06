#include "gpu/pinned_limit.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include "base/units.h"

namespace strata::gpu {

std::int64_t memlock_limit_bytes() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return -1;
  return static_cast<std::int64_t>(limit.rlim_cur);
}

UserError pinned_memory_refused(std::int64_t asked_bytes, const std::string& refusal,
                                std::int64_t limit_bytes, std::int64_t held_bytes) {
  std::int64_t needed_kib = (held_bytes + asked_bytes + 1023) / 1024;
  std::string limit =
      limit_bytes < 0
          ? std::string("unlimited")
          : fmt::format("{} ({} KiB, as `ulimit -l` shows it)",
                        base::format_bytes(static_cast<double>(limit_bytes)), limit_bytes / 1024);
  return UserError(
      fmt::format("could not lock {} ({} bytes) of pinned host memory: {}; the locked-memory "
                  "limit (RLIMIT_MEMLOCK) is {} and this device already holds {} locked",
                  base::format_bytes(static_cast<double>(asked_bytes)), asked_bytes, refusal, limit,
                  base::format_bytes(static_cast<double>(held_bytes))),
      fmt::format("raise the locked-memory limit to at least {} KiB: run `ulimit -l unlimited` (or "
                  "`ulimit -l {}`) in the shell that starts strata; to make it permanent for a "
                  "user, add `<user> - memlock unlimited` to /etc/security/limits.conf and log in "
                  "again; in a container, start it with `--ulimit memlock=-1:-1` (docker/podman). "
                  "Or pin less: lower buffer_count or buffer_size in offload_param / "
                  "offload_optimizer",
                  needed_kib, needed_kib));
}

}  // namespace strata::gpu

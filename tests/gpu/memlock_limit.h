#pragma once

// Makes the calling process one that may lock at most a given number of bytes, as a non-root
// user or a container without CAP_IPC_LOCK is: for tests that must see the kernel refuse to lock.
// Meant for a child process (a death test's, or one forked to exec strata): what it drops cannot
// be taken back.
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace strata::gpu::testing {

// Whether this build runs under AddressSanitizer, whose mlock is a no-op that succeeds: the
// kernel's refusals cannot be seen there.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool address_sanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool address_sanitizer = true;
#else
inline constexpr bool address_sanitizer = false;
#endif
#else
inline constexpr bool address_sanitizer = false;
#endif

// Drops CAP_IPC_LOCK from every set that could give it back (effective, permitted, inheritable,
// ambient, and the bounding set, from which root regains its capabilities at execve), then sets
// RLIMIT_MEMLOCK, soft and hard, to `limit_bytes` (a hard limit already lower stays). Only system
// calls, so that a child forked from a threaded process may call it before execve. Returns 0, or
// the step that failed (1-4), e.g. 1 for root without the right to drop the capability.
inline int limit_locked_memory(std::int64_t limit_bytes) {
  // A process without CAP_SETPCAP cannot touch the bounding set; it has no CAP_IPC_LOCK to
  // regain at execve unless it is root, and root has CAP_SETPCAP unless a container dropped it.
  if (::prctl(PR_CAPBSET_READ, CAP_IPC_LOCK, 0, 0, 0) == 1 &&
      ::prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0) != 0 && ::geteuid() == 0) {
    return 1;
  }
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &header, data) != 0) return 2;
  const auto index = CAP_TO_INDEX(CAP_IPC_LOCK);
  const auto mask = static_cast<__u32>(CAP_TO_MASK(CAP_IPC_LOCK));
  data[index].effective &= ~mask;
  data[index].permitted &= ~mask;
  data[index].inheritable &= ~mask;
  if (::syscall(SYS_capset, &header, data) != 0) return 3;
  // Lowering the hard limit too keeps the process from raising its soft limit back; a hard limit
  // already below `limit_bytes` stays (raising it needs CAP_SYS_RESOURCE).
  rlimit limit{};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return 4;
  const auto wanted = static_cast<rlim_t>(limit_bytes);
  if (limit.rlim_max == RLIM_INFINITY || limit.rlim_max > wanted) limit.rlim_max = wanted;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_MEMLOCK, &limit) != 0) return 4;
  return 0;
}

}  // namespace strata::gpu::testing

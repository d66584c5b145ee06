#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/error.h"

namespace strata::gpu {

// How much page-locked host memory this process may hold, as the kernel decides it. mlock(2),
// which the host device's pinned memory and io_uring's registered buffers go through, refuses to
// lock past the soft RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK in its effective set:
// do_mlock() in the kernel's mm/mlock.c locks when `locked <= lock_limit ||
// capable(CAP_IPC_LOCK)`. Root usually has CAP_IPC_LOCK, but a container or a bounding set may
// drop it (Docker's default set does), so being root says nothing by itself. `strata report`
// prints this, `strata estimate` checks against it, and a run decides whether to pin by it.
struct PinnedLimit {
  std::optional<std::int64_t> rlimit_bytes;  // the soft RLIMIT_MEMLOCK; nullopt: unlimited
  bool cap_ipc_lock = false;                 // CAP_IPC_LOCK in the effective set

  // The most bytes the process may hold locked; nullopt when no limit applies (RLIMIT_MEMLOCK
  // unlimited, or lifted by CAP_IPC_LOCK).
  std::optional<std::int64_t> lockable_bytes() const;
  // Whether `asked_bytes` more may be locked beside the `held_bytes` already locked.
  bool allows(std::int64_t held_bytes, std::int64_t asked_bytes) const;
  // For messages: "8.00 MiB (RLIMIT_MEMLOCK, 8192 KiB as `ulimit -l` shows it; no
  // CAP_IPC_LOCK)", "unlimited (RLIMIT_MEMLOCK 8.00 MiB, lifted by CAP_IPC_LOCK)", "unlimited".
  std::string describe() const;
};

// This process's limit: getrlimit(RLIMIT_MEMLOCK) and the effective set from capget(2). A capget
// that fails reads as no capability, so the limit applies (the answer that cannot overpromise).
PinnedLimit pinned_limit();

// How to be allowed to lock `needed_bytes` in all: raise RLIMIT_MEMLOCK to at least that many KiB
// (the shell, limits.conf, a container's --ulimit), or run with CAP_IPC_LOCK. A sentence for a
// message's fix, without a final period.
std::string raise_pinned_limit_fix(std::int64_t needed_bytes);

// The refusal of page-locked host memory, whichever backend met it (mlock on the host device,
// cudaHostAlloc on CUDA): the cause names the request, what refused it (`refusal`, e.g. "mlock
// failed with ENOMEM (...)"), what the process may lock (`limit`) and what the device already
// holds locked; the fix says how to raise the limit (raise_pinned_limit_fix) or to pin less.
UserError pinned_memory_refused(std::int64_t asked_bytes, const std::string& refusal,
                                const PinnedLimit& limit, std::int64_t held_bytes);

}  // namespace strata::gpu

#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace strata::aio {

// Which machinery moves the bytes. `automatic` tries io_uring and falls back to the pread/pwrite
// thread pool (one warning line) where the kernel or a sandbox refuses io_uring (ENOSYS, EPERM).
enum class Backend { automatic, io_uring, thread_pool };

// Whether files bypass the page cache. `optional` (the default) falls back to buffered I/O with
// one warning line where the file system refuses O_DIRECT (older tmpfs, some FUSE mounts);
// `required` makes that refusal an error; `off` always uses the page cache.
enum class DirectMode { required, optional, off };

// How an Engine and the files it opens behave. The engine maps DeepSpeed's `aio` section onto
// this struct (block_size, queue_depth, thread_count / intra_op_parallelism, single_submit,
// overlap_events); the rest are strata's own.
struct EngineOptions {
  // A transfer is split into pieces of this many bytes (the last one may be shorter).
  std::int64_t block_size_bytes = 1 << 20;
  // Pieces each ring keeps in flight at most.
  int queue_depth = 8;
  // Rings (one thread each); the pieces of a transfer are spread over them round robin.
  int thread_count = 1;
  // Submit each request with its own system call instead of one call per batch.
  bool single_submit = false;
  // Refill the queue as completions arrive; when false a ring waits for its whole batch to
  // finish before it submits the next one (DeepSpeed's overlap_events=false).
  bool overlap_events = true;
  // CRC32C of every 4 KiB sector written, checked on every read (see docs/aio.md).
  bool verify_checksums = true;
  Backend backend = Backend::automatic;
  DirectMode direct = DirectMode::optional;
  // Tickets that may be outstanding (submitted and not yet waited for) at once.
  int tickets_max = 4096;
  // Record per-request completion latency (two clock reads per batch, not per request).
  bool record_latency = false;
};

// Overrides `options` from the environment, so that a user can force a fallback without editing
// a config: STRATA_AIO_BACKEND=auto|io_uring|threads and STRATA_AIO_DIRECT=required|optional|off.
// Throws UserError (exit status 2) naming the variable and the allowed values for a bad value.
EngineOptions apply_environment(EngineOptions options);

// "io_uring", "threads", "auto"; "required", "optional", "off".
std::string_view to_string(Backend backend);
std::string_view to_string(DirectMode mode);

// Throws UserError (exit status 2) naming the field, the value and what is allowed when an
// option is out of range (block size not a positive multiple of 4 KiB, queue depth not in
// 1..4096, thread count not in 1..256, tickets_max < 1).
void validate(const EngineOptions& options);

}  // namespace strata::aio

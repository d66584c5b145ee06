#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>

#include "aio/errors.h"
#include "aio/fault_plan.h"
#include "aio/file.h"
#include "aio/latency.h"
#include "aio/options.h"

namespace strata::aio {

namespace detail {
class EngineCore;
}

// A transfer in flight. [[nodiscard]] like Seastar's future: dropping one loses its error.
// Redeem it exactly once with Engine::wait (or wait_all). Copyable so it can be stored; only the
// first wait on it is valid.
class [[nodiscard]] Ticket {
 public:
  Ticket() = default;
  bool valid() const noexcept { return generation_ != 0; }

 private:
  friend class Engine;
  Ticket(std::uint32_t slot, std::uint32_t generation) : slot_(slot), generation_(generation) {}
  std::uint32_t slot_ = 0;
  std::uint32_t generation_ = 0;
};

// What the engine did so far (for tests and io-bench).
struct EngineStats {
  std::int64_t requests = 0;        // requests handed to the kernel (resubmissions included)
  std::int64_t resubmissions = 0;   // short transfers, EAGAIN and EINTR resubmitted
  std::int64_t fixed_requests = 0;  // requests that used a registered buffer
};

// The I/O handle (docs/architecture.md, "The aio engine"): `thread_count` rings, each owned by one
// thread and keeping up to `queue_depth` requests in flight. A transfer is split into
// `block_size_bytes` pieces, spread round robin over the rings. submit_* return at once; results
// are kept in the ticket as -errno or counts, and only wait()/wait_all() turn them into exceptions.
//
// Submitting and waiting may happen from several threads, but one ticket is waited on by one
// thread. The buffer of a transfer must stay alive and untouched until its ticket is waited for.
class Engine {
 public:
  // Starts the rings. `options` are validated (UserError, exit status 2) and overridden by the
  // environment (apply_environment). Where io_uring cannot be set up (ENOSYS, EPERM) and the
  // backend is automatic, falls back to a pread/pwrite thread pool with one warning line; with
  // Backend::io_uring that is a UserError. `registered` (optional) is memory that lives as long
  // as the engine, registered with every ring as fixed buffers: pieces inside it skip the
  // kernel's per-request page pinning (the pinned pool passes its arena here).
  explicit Engine(EngineOptions options, FaultPlan faults = {},
                  std::span<std::byte> registered = {});
  // Waits for every transfer still in flight (errors are dropped: wait_all first to see them),
  // then stops and joins the ring threads.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Opens a file with this engine's direct mode and verification (see File::open).
  File open(const std::filesystem::path& path, OpenMode mode) const;

  // Reads `target.size()` bytes at `offset`. Throws std::invalid_argument at once, naming what
  // is misaligned, when the buffer address, offset or length is not a multiple of
  // file.alignment_bytes(). A read past the end of the file fails at wait (errno 0).
  Ticket submit_read(File& file, std::int64_t offset, std::span<std::byte> target);
  // Writes `source` at `offset`, growing the file with fallocate first when it extends it (an
  // ENOSPC there is reported at wait). Same alignment rule as submit_read.
  Ticket submit_write(File& file, std::int64_t offset, std::span<const std::byte> source);

  // Blocks until the transfer is done. Throws IoError (or ChecksumError) for its first failed
  // piece; the rest of its pieces are drained first, so the engine stays usable.
  void wait(Ticket ticket);
  // Waits for every outstanding ticket; throws the error of the earliest submitted one that
  // failed, after all of them are done.
  void wait_all();

  Backend backend() const noexcept;  // io_uring or thread_pool, never automatic
  const EngineOptions& options() const noexcept;
  EngineStats stats() const noexcept;
  // Completion latency of every request (submission to reaped completion), when
  // options.record_latency is on.
  LatencyHistogram& latency() noexcept;

 private:
  std::unique_ptr<detail::EngineCore> core_;
};

}  // namespace strata::aio

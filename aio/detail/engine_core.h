#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "aio/engine.h"
#include "aio/errors.h"
#include "aio/fault_plan.h"
#include "aio/latency.h"
#include "aio/options.h"

namespace strata::aio::detail {

struct FileState;
class EngineCore;

// One submitted transfer. Fields above `pieces_left` are written by the submitting thread before
// the slot is queued (the queue's mutex publishes them); the failure fields are written by the
// one piece that wins `failed`, before its release decrement of `pieces_left`, so a waiter that
// sees zero sees them.
struct TicketSlot {
  bool is_read = false;
  FileState* file = nullptr;
  std::int64_t offset = 0;
  std::byte* data = nullptr;
  std::int64_t length_bytes = 0;
  std::int64_t piece_count = 0;
  std::uint64_t sequence = 0;

  std::atomic<std::int64_t> pieces_left{0};
  std::atomic<bool> failed{false};

  Op error_op = Op::read;
  int error_errno = 0;
  std::int64_t error_offset = 0;
  std::int64_t error_length_bytes = 0;
  std::int64_t error_done_bytes = 0;
  bool checksum_failed = false;
  std::int64_t checksum_offset = 0;
  std::uint32_t checksum_expected = 0;
  std::uint32_t checksum_actual = 0;
  bool checksum_recorded = false;

  // Owned by the submit/wait side, under EngineCore::slots_mutex_.
  std::uint32_t generation = 1;
  bool in_use = false;
};

// One block_size piece of a transfer, as a ring takes it from its queue.
struct Piece {
  std::uint32_t slot = 0;
  std::int64_t offset = 0;
  std::byte* data = nullptr;
  std::int64_t length_bytes = 0;
};

// One request in flight on a ring: a piece plus how much of it is done.
struct Request {
  Piece piece;
  std::int64_t done_bytes = 0;
  int retries = 0;
  std::int64_t submitted_ns = 0;
};

// The transfers one ring still has pieces of, bounded by tickets_max. Piece k of a transfer goes
// to ring (start + k) mod ring_count, where the start ring rotates per transfer, so that small
// transfers spread over the rings too; a ring takes first_piece, first_piece + ring_count, ...
class WorkQueue {
 public:
  enum class Take { piece, empty, stopped };

  WorkQueue(EngineCore& core, int ring_count, int capacity);
  void push(std::uint32_t slot, std::int64_t first_piece);
  // Takes the next piece; with `block`, waits until there is one or the queue stops.
  Take take(Piece& piece, bool block);
  // After stop(), take() returns `stopped` once the queue is empty.
  void stop();

 private:
  EngineCore& core_;
  const int ring_count_;
  std::mutex mutex_;
  std::condition_variable ready_;
  struct Entry {
    std::uint32_t slot;
    std::int64_t first_piece;
  };
  std::vector<Entry> entries_;  // a circular buffer of `capacity` transfers
  std::size_t head_ = 0;
  std::size_t count_ = 0;
  std::int64_t next_piece_ = 0;
  bool stopping_ = false;
};

// A ring (io_uring) or a group of pread/pwrite threads, serving one WorkQueue.
class Worker {
 public:
  virtual ~Worker() = default;
};

// What an Engine is made of. Rings call take/complete; the Engine calls the rest.
class EngineCore {
 public:
  EngineCore(EngineOptions options, FaultPlan faults, std::span<std::byte> registered);
  ~EngineCore();

  struct TicketId {
    std::uint32_t slot;
    std::uint32_t generation;
  };
  // Throws std::invalid_argument for a misaligned request and std::length_error when
  // tickets_max tickets are already outstanding (both are caller bugs).
  TicketId submit(bool is_read, FileState& file, std::int64_t offset, std::byte* data,
                  std::int64_t length_bytes);
  void wait(std::uint32_t slot, std::uint32_t generation);
  void wait_all();

  // Ring side. What to do with a request after its result (bytes or -errno) came back.
  enum class Next { resubmit, finished };
  Next complete(Request& request, std::int64_t result);
  // Whether `result` completes the rest of `request` with nothing to resubmit or record and no
  // fault plan to consult. Such a piece may be finished later, with finish_whole, so that a ring
  // refills its queue before it checksums what came back.
  bool completes_whole(const Request& request, std::int64_t result) const noexcept {
    return !faults_rewrite_ && result > 0 &&
           result == request.piece.length_bytes - request.done_bytes;
  }
  // Records (write) or verifies (read) the checksums of a piece that completes_whole, then counts
  // it done; the last piece of a transfer wakes its waiter.
  void finish_whole(const Piece& piece);
  // A piece of a transfer that already failed: finished without I/O.
  void cancel(const Piece& piece);
  TicketSlot& slot(std::uint32_t index) { return slots_[index]; }
  WorkQueue& queue(int ring_index) { return *queues_[static_cast<std::size_t>(ring_index)]; }

  const EngineOptions& options() const noexcept { return options_; }
  Backend backend() const noexcept { return backend_; }
  const FaultPlan& faults() const noexcept { return faults_; }
  LatencyHistogram& latency() noexcept { return latency_; }
  EngineStats stats() const noexcept;
  std::atomic<std::int64_t> requests{0};
  std::atomic<std::int64_t> resubmissions{0};
  std::atomic<std::int64_t> fixed_requests{0};

  static std::int64_t now_ns() noexcept;

 private:
  void start_workers(std::span<std::byte> registered);
  void finish(std::uint32_t slot);
  void record_failure(const Request& request, int errno_value);
  bool verify_or_record(const Piece& piece);
  std::int64_t apply_fault(Request& request, std::int64_t result, bool& flip_bit,
                           std::uint64_t& bit_index);
  std::exception_ptr release(std::uint32_t slot);
  std::uint32_t acquire_slot();

  EngineOptions options_;
  FaultPlan faults_;
  bool faults_rewrite_ = false;  // faults_.rewrites_completions(), read per completion
  Backend backend_ = Backend::io_uring;
  std::unique_ptr<TicketSlot[]> slots_;
  std::mutex slots_mutex_;
  std::vector<std::uint32_t> free_slots_;
  std::uint64_t next_sequence_ = 0;
  std::atomic<std::int64_t> completions_{0};
  LatencyHistogram latency_;
  std::vector<std::unique_ptr<WorkQueue>> queues_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

// Makes the io_uring ring `ring_index`, set up on its own thread. Returns the worker, or null with
// `setup_errno` set when the kernel refuses io_uring.
std::unique_ptr<Worker> make_uring_worker(EngineCore& core, int ring_index,
                                          std::span<std::byte> registered, int& setup_errno);
// Makes `queue_depth` pread/pwrite threads serving queue `ring_index`.
std::unique_ptr<Worker> make_thread_pool_worker(EngineCore& core, int ring_index);

}  // namespace strata::aio::detail

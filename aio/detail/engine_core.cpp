#include "aio/detail/engine_core.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <utility>

#include "aio/detail/file_state.h"
#include "base/assert.h"
#include "base/log.h"

namespace strata::aio::detail {
namespace {

void check_alignment(bool is_read, const FileState& file, std::int64_t offset,
                     const std::byte* data, std::int64_t length_bytes) {
  std::int64_t alignment = file.alignment_bytes;
  auto address = reinterpret_cast<std::uintptr_t>(data);
  const char* what = nullptr;
  std::int64_t value = 0;
  if (offset < 0 || offset % alignment != 0) {
    what = "offset";
    value = offset;
  } else if (length_bytes % alignment != 0) {
    what = "length";
    value = length_bytes;
  } else if (address % static_cast<std::uintptr_t>(alignment) != 0) {
    what = "buffer address";
    value = static_cast<std::int64_t>(address % static_cast<std::uintptr_t>(alignment));
  }
  if (what == nullptr) return;
  throw std::invalid_argument(fmt::format(
      "submit_{} on {}: the {} ({}{}) is not a multiple of the file's alignment {} bytes; aio "
      "refuses misaligned requests instead of bouncing them (docs/aio.md): use an "
      "aio::AlignedBuffer and multiples of {}",
      is_read ? "read" : "write", file.path, what, value,
      std::string_view(what) == "buffer address" ? " bytes past a boundary" : "", alignment,
      alignment));
}

}  // namespace

WorkQueue::WorkQueue(EngineCore& core, int ring_count, int capacity)
    : core_(core), ring_count_(ring_count), entries_(static_cast<std::size_t>(capacity)) {}

void WorkQueue::push(std::uint32_t slot, std::int64_t first_piece) {
  {
    std::lock_guard lock(mutex_);
    STRATA_ASSERT(count_ < entries_.size());  // one entry per outstanding ticket at most
    entries_[(head_ + count_) % entries_.size()] = Entry{slot, first_piece};
    if (count_ == 0) next_piece_ = first_piece;
    ++count_;
  }
  ready_.notify_one();
}

WorkQueue::Take WorkQueue::take(Piece& piece, bool block) {
  std::unique_lock lock(mutex_);
  if (block) ready_.wait(lock, [this] { return count_ > 0 || stopping_; });
  if (count_ == 0) return stopping_ ? Take::stopped : Take::empty;
  std::uint32_t slot = entries_[head_].slot;
  const TicketSlot& ticket = core_.slot(slot);
  std::int64_t block_size = core_.options().block_size_bytes;
  std::int64_t start = next_piece_ * block_size;
  piece = Piece{slot, ticket.offset + start, ticket.data + start,
                std::min(block_size, ticket.length_bytes - start)};
  next_piece_ += ring_count_;
  if (next_piece_ >= ticket.piece_count) {
    head_ = (head_ + 1) % entries_.size();
    --count_;
    if (count_ > 0) next_piece_ = entries_[head_].first_piece;
  }
  return Take::piece;
}

void WorkQueue::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
}

EngineCore::EngineCore(EngineOptions options, FaultPlan faults, std::span<std::byte> registered)
    : options_(apply_environment(options)),
      faults_(std::move(faults)),
      faults_rewrite_(faults_.rewrites_completions()) {
  validate(options_);
  slots_ = std::make_unique<TicketSlot[]>(static_cast<std::size_t>(options_.tickets_max));
  free_slots_.reserve(static_cast<std::size_t>(options_.tickets_max));
  for (int i = options_.tickets_max - 1; i >= 0; --i) {
    free_slots_.push_back(static_cast<std::uint32_t>(i));
  }
  start_workers(registered);
}

void EngineCore::start_workers(std::span<std::byte> registered) {
  auto make_queues = [this] {
    queues_.clear();
    for (int ring = 0; ring < options_.thread_count; ++ring) {
      queues_.push_back(
          std::make_unique<WorkQueue>(*this, options_.thread_count, options_.tickets_max));
    }
  };
  make_queues();
  if (options_.backend != Backend::thread_pool) {
    int setup_errno = faults_.io_uring_refused_errno();
    for (int ring = 0; ring < options_.thread_count && setup_errno == 0; ++ring) {
      auto worker = make_uring_worker(*this, ring, registered, setup_errno);
      if (worker) workers_.push_back(std::move(worker));
    }
    if (setup_errno == 0) {
      backend_ = Backend::io_uring;
      return;
    }
    for (auto& queue : queues_)
      queue->stop();
    workers_.clear();
    if (options_.backend == Backend::io_uring) {
      throw UserError(fmt::format("io_uring cannot be set up: {} ({})", std::strerror(setup_errno),
                                  strerrorname_np(setup_errno)),
                      "run on Linux 5.10 or newer outside a sandbox that blocks io_uring "
                      "(seccomp, kernel.io_uring_disabled), or set STRATA_AIO_BACKEND=threads",
                      1);
    }
    base::logger("aio").warn(
        "io_uring cannot be set up ({}): using the pread/pwrite thread pool fallback "
        "(set STRATA_AIO_BACKEND=threads to choose it without this warning)",
        strerrorname_np(setup_errno));
    make_queues();
  }
  backend_ = Backend::thread_pool;
  for (int ring = 0; ring < options_.thread_count; ++ring) {
    workers_.push_back(make_thread_pool_worker(*this, ring));
  }
}

EngineCore::~EngineCore() {
  // Drain: every piece must finish before its buffer's owner may go away.
  for (int i = 0; i < options_.tickets_max; ++i) {
    TicketSlot& ticket = slots_[static_cast<std::size_t>(i)];
    for (std::int64_t left = ticket.pieces_left.load(std::memory_order_acquire); left != 0;
         left = ticket.pieces_left.load(std::memory_order_acquire)) {
      ticket.pieces_left.wait(left, std::memory_order_acquire);
    }
  }
  for (auto& queue : queues_)
    queue->stop();
  workers_.clear();  // joins the threads
}

std::int64_t EngineCore::now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::uint32_t EngineCore::acquire_slot() {
  std::lock_guard lock(slots_mutex_);
  if (free_slots_.empty()) {
    throw std::length_error(fmt::format(
        "aio: {} tickets are outstanding, the engine's bound (tickets_max): wait on some before "
        "submitting more",
        options_.tickets_max));
  }
  std::uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  TicketSlot& ticket = slots_[slot];
  ticket.in_use = true;
  ticket.sequence = next_sequence_++;
  return slot;
}

EngineCore::TicketId EngineCore::submit(bool is_read, FileState& file, std::int64_t offset,
                                        std::byte* data, std::int64_t length_bytes) {
  check_alignment(is_read, file, offset, data, length_bytes);
  std::uint32_t index = acquire_slot();
  TicketSlot& ticket = slots_[index];
  ticket.is_read = is_read;
  ticket.file = &file;
  ticket.offset = offset;
  ticket.data = data;
  ticket.length_bytes = length_bytes;
  std::int64_t block_size = options_.block_size_bytes;
  ticket.piece_count = (length_bytes + block_size - 1) / block_size;
  ticket.failed.store(false, std::memory_order_relaxed);
  ticket.checksum_failed = false;
  if (!is_read && length_bytes > 0) {
    int result = file.ensure_size(offset + length_bytes);
    if (result != 0) {
      ticket.failed.store(true, std::memory_order_relaxed);
      ticket.error_op = Op::allocate;
      ticket.error_errno = -result;
      ticket.error_offset = offset;
      ticket.error_length_bytes = length_bytes;
      ticket.error_done_bytes = 0;
      ticket.piece_count = 0;
    }
  }
  ticket.pieces_left.store(ticket.piece_count, std::memory_order_release);
  std::int64_t ring_count = options_.thread_count;
  auto start = static_cast<std::int64_t>(ticket.sequence % static_cast<std::uint64_t>(ring_count));
  for (std::int64_t piece = 0; piece < std::min(ring_count, ticket.piece_count); ++piece) {
    queues_[static_cast<std::size_t>((start + piece) % ring_count)]->push(index, piece);
  }
  return TicketId{index, ticket.generation};
}

void EngineCore::wait(std::uint32_t slot, std::uint32_t generation) {
  STRATA_ASSERT(slot < static_cast<std::uint32_t>(options_.tickets_max));
  TicketSlot& ticket = slots_[slot];
  {
    std::lock_guard lock(slots_mutex_);
    STRATA_ASSERT(ticket.in_use);                    // a ticket is waited on once
    STRATA_ASSERT(ticket.generation == generation);  // and only while it is current
  }
  for (std::int64_t left = ticket.pieces_left.load(std::memory_order_acquire); left != 0;
       left = ticket.pieces_left.load(std::memory_order_acquire)) {
    ticket.pieces_left.wait(left, std::memory_order_acquire);
  }
  if (std::exception_ptr error = release(slot)) std::rethrow_exception(error);
}

void EngineCore::wait_all() {
  std::vector<std::pair<std::uint64_t, std::uint32_t>> outstanding;
  {
    std::lock_guard lock(slots_mutex_);
    for (int i = 0; i < options_.tickets_max; ++i) {
      const TicketSlot& ticket = slots_[static_cast<std::size_t>(i)];
      if (ticket.in_use) outstanding.emplace_back(ticket.sequence, static_cast<std::uint32_t>(i));
    }
  }
  std::sort(outstanding.begin(), outstanding.end());
  std::exception_ptr first;
  for (const auto& [sequence, slot] : outstanding) {
    TicketSlot& ticket = slots_[slot];
    for (std::int64_t left = ticket.pieces_left.load(std::memory_order_acquire); left != 0;
         left = ticket.pieces_left.load(std::memory_order_acquire)) {
      ticket.pieces_left.wait(left, std::memory_order_acquire);
    }
    std::exception_ptr error = release(slot);
    if (!first) first = error;
  }
  if (first) std::rethrow_exception(first);
}

std::exception_ptr EngineCore::release(std::uint32_t slot) {
  TicketSlot& ticket = slots_[slot];
  std::exception_ptr error;
  if (ticket.failed.load(std::memory_order_acquire)) {
    const std::string& path = ticket.file->path;
    if (ticket.checksum_failed) {
      error = std::make_exception_ptr(
          ChecksumError(path, ticket.checksum_offset, ticket.checksum_expected,
                        ticket.checksum_actual, ticket.checksum_recorded));
    } else {
      error = std::make_exception_ptr(IoError(ticket.error_op, path, ticket.error_offset,
                                              ticket.error_length_bytes, ticket.error_done_bytes,
                                              ticket.error_errno));
    }
  }
  std::lock_guard lock(slots_mutex_);
  ticket.in_use = false;
  ticket.file = nullptr;
  ticket.data = nullptr;
  ticket.generation = ticket.generation == UINT32_MAX ? 1 : ticket.generation + 1;
  free_slots_.push_back(slot);
  return error;
}

void EngineCore::finish(std::uint32_t slot) {
  TicketSlot& ticket = slots_[slot];
  if (ticket.pieces_left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    ticket.pieces_left.notify_all();
  }
}

void EngineCore::record_failure(const Request& request, int errno_value) {
  TicketSlot& ticket = slots_[request.piece.slot];
  bool expected = false;
  if (!ticket.failed.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) return;
  ticket.error_op = ticket.is_read ? Op::read : Op::write;
  ticket.error_errno = errno_value;
  ticket.error_offset = request.piece.offset;
  ticket.error_length_bytes = request.piece.length_bytes;
  ticket.error_done_bytes = request.done_bytes;
}

void EngineCore::cancel(const Piece& piece) {
  finish(piece.slot);
}

EngineStats EngineCore::stats() const noexcept {
  return EngineStats{requests.load(std::memory_order_relaxed),
                     resubmissions.load(std::memory_order_relaxed),
                     fixed_requests.load(std::memory_order_relaxed)};
}

}  // namespace strata::aio::detail

// What happens to a request once the kernel (or pread) answered: the fault plan may rewrite the
// real result, then EINTR/EAGAIN and short transfers are resubmitted for the remainder, errors
// are recorded in the ticket (the first one wins), and whole pieces are checksummed.
#include <cerrno>

#include "aio/detail/engine_core.h"
#include "aio/detail/file_state.h"
#include "base/assert.h"

namespace strata::aio::detail {
namespace {

// EINTR/EAGAIN resubmissions of one request before it counts as failed: a bound on the loop
// (TIGER_STYLE), far above what a healthy kernel ever asks for.
constexpr int retries_max = 1000;

}  // namespace

std::int64_t EngineCore::apply_fault(Request& request, std::int64_t result, bool& flip_bit,
                                     std::uint64_t& bit_index) {
  const TicketSlot& ticket = slots_[request.piece.slot];
  std::int64_t index = completions_.fetch_add(1, std::memory_order_relaxed);
  std::optional<Fault> fault = faults_.at(index, ticket.is_read);
  if (!fault) return result;
  switch (fault->kind) {
    case FaultKind::error:
      return -fault->errno_value;
    case FaultKind::short_transfer:
      // Half, aligned down to 4 KiB, so the remainder stays a valid O_DIRECT request.
      if (result >= 8192) return result / 2 / 4096 * 4096;
      return result;
    case FaultKind::bit_flip:
      flip_bit = true;
      bit_index = fault->bit_index;
      return result;
  }
  return result;
}

EngineCore::Next EngineCore::complete(Request& request, std::int64_t result) {
  TicketSlot& ticket = slots_[request.piece.slot];
  bool flip_bit = false;
  std::uint64_t bit_index = 0;
  result = apply_fault(request, result, flip_bit, bit_index);
  std::int64_t remaining = request.piece.length_bytes - request.done_bytes;
  STRATA_ASSERT(result <= remaining);
  if (result == -EINTR || result == -EAGAIN) {
    if (++request.retries <= retries_max) {
      resubmissions.fetch_add(1, std::memory_order_relaxed);
      return Next::resubmit;
    }
  }
  if (result < 0) {
    record_failure(request, static_cast<int>(-result));
    finish(request.piece.slot);
    return Next::finished;
  }
  if (result == 0) {
    // A read of 0 bytes is the end of the file; a write of 0 bytes makes no progress.
    record_failure(request, ticket.is_read ? 0 : EIO);
    finish(request.piece.slot);
    return Next::finished;
  }
  request.done_bytes += result;
  if (request.done_bytes < request.piece.length_bytes) {
    // Under O_DIRECT the kernel only stops short at an unaligned spot at the end of the file; a
    // resubmission from there would fail with EINVAL, so report the end of the file instead.
    std::int64_t position = request.piece.offset + request.done_bytes;
    if (ticket.file->direct && position % ticket.file->alignment_bytes != 0) {
      record_failure(request, ticket.is_read ? 0 : EIO);
      finish(request.piece.slot);
      return Next::finished;
    }
    request.retries = 0;
    resubmissions.fetch_add(1, std::memory_order_relaxed);
    return Next::resubmit;
  }
  if (flip_bit && ticket.is_read) {
    std::uint64_t bit = bit_index % static_cast<std::uint64_t>(request.piece.length_bytes * 8);
    request.piece.data[bit / 8] ^= std::byte{static_cast<unsigned char>(1u << (bit % 8))};
  }
  if (ticket.file->verify) verify_or_record(request.piece);
  finish(request.piece.slot);
  return Next::finished;
}

void EngineCore::finish_whole(const Piece& piece) {
  if (slots_[piece.slot].file->verify) verify_or_record(piece);
  finish(piece.slot);
}

bool EngineCore::verify_or_record(const Piece& piece) {
  TicketSlot& ticket = slots_[piece.slot];
  ChecksumTable& checksums = ticket.file->checksums;
  if (!ticket.is_read) {
    checksums.record(piece.offset, piece.data, piece.length_bytes);
    return true;
  }
  auto mismatch = checksums.verify(piece.offset, piece.data, piece.length_bytes);
  if (!mismatch) return true;
  bool expected = false;
  if (ticket.failed.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
    ticket.error_op = Op::read;
    ticket.checksum_failed = true;
    ticket.checksum_offset = mismatch->sector_offset;
    ticket.checksum_expected = mismatch->expected;
    ticket.checksum_actual = mismatch->actual;
    ticket.checksum_recorded = mismatch->recorded;
  }
  return false;
}

}  // namespace strata::aio::detail

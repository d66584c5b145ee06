#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "gpu/device.h"
#include "gpu/process_group.h"
#include "gpu/stream.h"

namespace strata::gpu {

// The element type of a collective's buffers.
enum class DataType { float32, bfloat16, float16, int32, int64, uint8 };

// "float32", "bfloat16", ... (for logs and messages).
std::string_view to_string(DataType type);

// Bytes per element: 4, 2, 2, 4, 8, 1.
std::int64_t size_bytes(DataType type);

// How reduce_scatter and all_reduce combine the ranks' values, element by element.
//
// Every backend reduces in the same fixed order, rank 0 first, then 1, 2, ..., so that the result
// is bitwise the same on every rank and in every run (training must be reproducible):
// - float32 accumulates in float32; bfloat16 and float16 accumulate in float32 and round once,
//   to nearest even, at the end (MPI and BLAS have no 2-byte float; the single rounding is also
//   more accurate than rounding after every pairwise sum).
// - Integers accumulate in 64 bits; a sum that does not fit the type wraps modulo 2^bits, as
//   NCCL's does.
// - `avg` is the sum divided by world_size (float division for floats; for integers, division
//   truncating toward zero).
// - `max` of floats propagates NaN: a NaN on any rank makes the result NaN (the fp16 overflow
//   check relies on it).
enum class ReduceOp { sum, avg, max };

// "sum", "avg", "max".
std::string_view to_string(ReduceOp op);

// The kinds of collective, for the traffic counters.
enum class CollectiveKind { all_gather, reduce_scatter, all_reduce, broadcast };
inline constexpr int collective_kind_count = 4;

// "all_gather", ...
std::string_view to_string(CollectiveKind kind);

// What this rank handed into and got out of one kind of collective, in bytes of its own buffers
// (not wire bytes, which depend on the algorithm), so that a test can check them against theory:
//
// | collective     | bytes_sent                    | bytes_received                |
// |----------------|-------------------------------|-------------------------------|
// | all_gather     | count_per_rank x size         | world_size x count x size     |
// | reduce_scatter | world_size x count x size     | count_per_rank x size         |
// | all_reduce     | count x size                  | count x size                  |
// | broadcast      | count x size on the root, 0   | 0 on the root, count x size   |
//
// Counted when the collective is enqueued, so the figures are exact as soon as the call returns.
struct CollectiveTraffic {
  std::int64_t calls = 0;
  std::int64_t bytes_sent = 0;
  std::int64_t bytes_received = 0;
};

// Traffic per kind of collective since the Comm was made or since `reset_counters()`.
struct CommCounters {
  std::array<CollectiveTraffic, collective_kind_count> by_kind{};

  const CollectiveTraffic& operator[](CollectiveKind kind) const {
    return by_kind[static_cast<std::size_t>(kind)];
  }
};

// The collectives of ZeRO among the ranks of a World, with NCCL's semantics: every call only
// enqueues the collective on `stream` and returns; it runs in stream order (after the work
// enqueued on that stream before it, and before the work enqueued after it), so other streams are
// ordered against it with events. Buffers are device memory of the Comm's device; they must stay
// alive and (for sources) unchanged until the collective has run.
//
// Rules the caller keeps, as with NCCL:
// - Every rank calls the same collectives, with the same counts, types, ops and roots, in the same
//   order. One Comm runs its collectives one at a time, in the order they were enqueued (even when
//   they are enqueued on several streams), so that order is the order of the calls. Collectives of
//   different Comms may run at the same time: make one Comm per stream that should overlap.
// - A collective enqueued after another one on the same Comm must not be made to wait, through
//   events, for work enqueued after that later collective (it would wait forever).
// - Destroy a Comm only after its collectives have run (synchronize their streams); the
//   destructor waits for any that are still queued.
//
// Counts are elements, not bytes; any count >= 0 works (odd counts, zero). In-place use as NCCL
// allows it: all_gather with send == receive + rank x count x size, reduce_scatter with receive ==
// send + rank x count x size. Otherwise the send and receive ranges must not overlap.
//
// Errors a collective meets while running (an MPI failure) are captured by the stream like any
// stream error (see gpu/stream.h).
class Comm {
 public:
  virtual ~Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // This process's rank in the World, 0 <= rank() < world_size().
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // "mpi", "nccl" or "solo" (world size 1), for logs.
  virtual std::string_view backend() const = 0;

  // Rank r's `count_per_rank` elements at `send` land at `receive + r x count_per_rank` on every
  // rank; `receive` holds world_size() x count_per_rank elements (ZeRO-3's parameter gather).
  virtual void all_gather(Stream& stream, const void* send, void* receive,
                          std::int64_t count_per_rank, DataType type) = 0;

  // `send` holds world_size() x count_per_rank elements on every rank; rank r receives the
  // reduction over all ranks of block r (elements [r x count, (r + 1) x count)) at `receive`
  // (ZeRO's gradient reduction).
  virtual void reduce_scatter(Stream& stream, const void* send, void* receive,
                              std::int64_t count_per_rank, DataType type, ReduceOp op) = 0;

  // Replaces `data` (count elements) on every rank by the reduction over all ranks, bitwise the
  // same on every rank and equal to reduce_scatter followed by all_gather.
  virtual void all_reduce(Stream& stream, void* data, std::int64_t count, DataType type,
                          ReduceOp op) = 0;

  // Copies `root`'s `count` elements at `data` into `data` on every other rank.
  virtual void broadcast(Stream& stream, void* data, std::int64_t count, DataType type,
                         int root) = 0;

  // Blocks the calling thread until every rank has called barrier() (not stream-ordered: it does
  // not wait for queued collectives; synchronize streams first when that is meant).
  virtual void barrier() = 0;

  // Bytes handed into and out of each kind of collective (see CollectiveTraffic).
  CommCounters counters() const;
  void reset_counters();

 protected:
  Comm() = default;

  // What every backend does first in each collective, before it enqueues anything: asserts the
  // arguments (count >= 0, pointers non-null when count > 0, a broadcast's root in range) and adds
  // the call to the counters with this rank's bytes as the CollectiveTraffic table has them.
  // `count` is count_per_rank for all_gather and reduce_scatter; `send` and `receive` are both
  // `data` for all_reduce and broadcast; `root` is read only for broadcast.
  void begin_collective(CollectiveKind kind, const void* send, const void* receive,
                        std::int64_t count, DataType type, int root = 0);

 private:
  struct AtomicTraffic {
    std::atomic<std::int64_t> calls{0};
    std::atomic<std::int64_t> bytes_sent{0};
    std::atomic<std::int64_t> bytes_received{0};
  };
  std::array<AtomicTraffic, collective_kind_count> traffic_;
};

// Which backend `create_comm` uses.
enum class CommBackend { mpi, solo, nccl };

// The choice `create_comm` makes, for a World that does or does not use MPI, of `world_size`
// ranks, on a device of `kind`: MPI on the host device under MPI, solo for one rank, NCCL for
// several ranks on CUDA devices. A build without CUDA throws UserError for that last case.
CommBackend choose_comm_backend(bool uses_mpi, int world_size, DeviceKind kind);

// The Comm of `world` for buffers of `device`: the MPI backend when the World runs under MPI and
// the device is the host device; the solo backend (collectives are copies) for a world of one
// process started without MPI. Collective over the World's ranks: every rank calls it, in the
// same order as its other create_comm calls (each Comm is its own MPI communicator). The Comm
// must be destroyed before `world` and `device`.
//
// Several ranks on CUDA devices get the NCCL backend (gpu/cuda/nccl_comm.cpp): rank 0's
// ncclUniqueId travels over MPI and each rank joins on its device; collectives run on the given
// stream, barrier() is an MPI barrier.
std::unique_ptr<Comm> create_comm(World& world, Device& device);

}  // namespace strata::gpu

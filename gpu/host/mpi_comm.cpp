#include "gpu/host/mpi_comm.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/assert.h"
#include "base/by_index.h"
#include "gpu/host/detail/reduce.h"

namespace strata::gpu::host {
namespace {

// Turns an MPI return code into an exception that the stream captures (the communicators use
// MPI_ERRORS_RETURN, so a failure comes back here instead of aborting every rank).
void check(int result, const char* call, int rank) {
  if (result == MPI_SUCCESS) return;
  std::string text(MPI_MAX_ERROR_STRING, '\0');
  int length = 0;
  MPI_Error_string(result, text.data(), &length);
  text.resize(static_cast<std::size_t>(std::max(length, 0)));
  throw std::runtime_error("gpu comm: " + std::string(call) + " failed on rank " +
                           std::to_string(rank) + ": " + text);
}

// `length` contiguous bytes whose extent is `extent` bytes, so that "one of these" per rank
// addresses block r at base + r x extent: a slice of each rank block in a single MPI call.
class StridedBytes {
 public:
  StridedBytes(int length, std::int64_t extent) {
    MPI_Datatype contiguous = MPI_DATATYPE_NULL;
    MPI_Type_contiguous(length, MPI_BYTE, &contiguous);
    MPI_Type_create_resized(contiguous, 0, static_cast<MPI_Aint>(extent), &type_);
    MPI_Type_free(&contiguous);
    MPI_Type_commit(&type_);
  }
  ~StridedBytes() { MPI_Type_free(&type_); }
  StridedBytes(const StridedBytes&) = delete;
  StridedBytes& operator=(const StridedBytes&) = delete;

  MPI_Datatype get() const { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

int to_int(std::int64_t value) {
  STRATA_ASSERT(value >= 0);
  STRATA_ASSERT(value <= INT_MAX);
  return static_cast<int>(value);
}

class MpiComm final : public Comm {
 public:
  MpiComm(World& world, const MpiCommOptions& options)
      : world_(world), chunk_bytes_(options.chunk_bytes) {
    STRATA_ASSERT(world.uses_mpi());
    STRATA_ASSERT(chunk_bytes_ >= 1);
    // Each Comm is its own pair of communicators: one for the collectives (run on stream
    // threads, one at a time) and one for barrier() (called from the user's thread, possibly
    // while a collective runs: MPI forbids two threads in collectives on one communicator).
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_dup(MPI_COMM_WORLD, &barrier_comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(barrier_comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &world_size_);
    send_counts_.resize(world_size_);
    send_offsets_.resize(world_size_);
    receive_counts_.resize(world_size_);
    receive_offsets_.resize(world_size_);
    world_.add_comm();
  }

  ~MpiComm() override {
    {
      std::unique_lock lock(mutex_);
      turn_changed_.wait(lock, [this] { return turn_ == next_ticket_; });
    }
    MPI_Comm_free(&barrier_comm_);
    MPI_Comm_free(&comm_);
    world_.remove_comm();
  }

  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string_view backend() const override { return "mpi"; }

  void all_gather(Stream& stream, const void* send, void* receive, std::int64_t count_per_rank,
                  DataType type) override {
    begin_collective(CollectiveKind::all_gather, send, receive, count_per_rank, type);
    enqueue(stream,
            Op{CollectiveKind::all_gather, type, ReduceOp::sum, 0, send, receive, count_per_rank});
  }

  void reduce_scatter(Stream& stream, const void* send, void* receive, std::int64_t count_per_rank,
                      DataType type, ReduceOp op) override {
    begin_collective(CollectiveKind::reduce_scatter, send, receive, count_per_rank, type);
    enqueue(stream, Op{CollectiveKind::reduce_scatter, type, op, 0, send, receive, count_per_rank});
  }

  void all_reduce(Stream& stream, void* data, std::int64_t count_elements, DataType type,
                  ReduceOp op) override {
    begin_collective(CollectiveKind::all_reduce, data, data, count_elements, type);
    enqueue(stream, Op{CollectiveKind::all_reduce, type, op, 0, data, data, count_elements});
  }

  void broadcast(Stream& stream, void* data, std::int64_t count_elements, DataType type,
                 int root) override {
    begin_collective(CollectiveKind::broadcast, data, data, count_elements, type, root);
    enqueue(stream,
            Op{CollectiveKind::broadcast, type, ReduceOp::sum, root, data, data, count_elements});
  }

  void barrier() override {
    std::lock_guard lock(barrier_mutex_);
    check(MPI_Barrier(barrier_comm_), "MPI_Barrier", rank_);
  }

 private:
  // One collective's arguments, captured by value in its host task.
  struct Op {
    CollectiveKind kind;
    DataType type;
    ReduceOp reduce_op;
    int root;
    const void* send;
    void* receive;
    std::int64_t count;
  };

  // The place of one collective in this Comm's order. Released exactly once: after the
  // collective ran (or threw), or when its task is destroyed without running (the stream skips
  // work after an error), so that the collectives behind it are never stuck.
  class Turn {
   public:
    Turn(MpiComm* comm, std::uint64_t ticket) noexcept : comm_(comm), ticket_(ticket) {}
    Turn(Turn&& other) noexcept
        : comm_(std::exchange(other.comm_, nullptr)), ticket_(other.ticket_) {}
    Turn& operator=(Turn&&) = delete;
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    ~Turn() {
      if (comm_ != nullptr) comm_->release_turn(ticket_);
    }
    std::uint64_t ticket() const { return ticket_; }

   private:
    MpiComm* comm_;
    std::uint64_t ticket_;
  };

  void enqueue(Stream& stream, const Op& op) {
    std::uint64_t ticket = 0;
    {
      std::lock_guard lock(mutex_);
      ticket = next_ticket_++;
    }
    // The collective's stand-in for NCCL's kernel, not a host function.
    stream.launch(HostTask::kernel([this, op, turn = Turn(this, ticket)]() mutable {
      const Turn mine = std::move(turn);  // released when this body ends, thrown or not
      wait_turn(mine.ticket());
      run(op);
    }));
  }

  void wait_turn(std::uint64_t ticket) {
    std::unique_lock lock(mutex_);
    turn_changed_.wait(lock, [&] { return turn_ == ticket; });
  }

  void release_turn(std::uint64_t ticket) noexcept {
    {
      std::lock_guard lock(mutex_);
      if (ticket != turn_) {
        // Dropped before its turn: skip it when the turn gets there.
        dropped_.insert(ticket);
        return;
      }
      ++turn_;
      while (dropped_.erase(turn_) > 0)
        ++turn_;
    }
    turn_changed_.notify_all();
  }

  void run(const Op& op) {
    switch (op.kind) {
      case CollectiveKind::all_gather:
        return run_all_gather(op);
      case CollectiveKind::reduce_scatter:
        return run_reduce_scatter(op);
      case CollectiveKind::all_reduce:
        return run_all_reduce(op);
      case CollectiveKind::broadcast:
        return run_broadcast(op);
    }
  }

  void run_all_gather(const Op& op) {
    const std::int64_t bytes = op.count * size_bytes(op.type);
    const auto* send = static_cast<const std::byte*>(op.send);
    auto* receive = static_cast<std::byte*>(op.receive);
    // NCCL's in-place form: this rank's block already sits in the receive buffer.
    const bool in_place = send == receive + rank_ * bytes;
    for (std::int64_t offset = 0; offset < bytes; offset += chunk_bytes_) {
      const int length = to_int(std::min(chunk_bytes_, bytes - offset));
      const StridedBytes block(length, bytes);
      check(MPI_Allgather(in_place ? MPI_IN_PLACE : send + offset, length, MPI_BYTE,
                          receive + offset, 1, block.get(), comm_),
            "MPI_Allgather", rank_);
    }
  }

  // Block r of every rank's send buffer travels to rank r (MPI_Alltoall), which reduces the
  // world_size copies in rank order: the same order on every rank and in every run.
  void run_reduce_scatter(const Op& op) {
    const std::int64_t element_bytes = size_bytes(op.type);
    const std::int64_t block_bytes = op.count * element_bytes;
    const std::int64_t chunk_elements = std::max<std::int64_t>(1, chunk_bytes_ / element_bytes);
    const auto* send = static_cast<const std::byte*>(op.send);
    auto* receive = static_cast<std::byte*>(op.receive);
    reserve_scratch(world_size_ * std::min(chunk_elements, op.count) * element_bytes);
    for (std::int64_t begin = 0; begin < op.count; begin += chunk_elements) {
      const std::int64_t length = std::min(chunk_elements, op.count - begin);
      const std::int64_t length_bytes = length * element_bytes;
      const StridedBytes slice(to_int(length_bytes), block_bytes);
      check(MPI_Alltoall(send + begin * element_bytes, 1, slice.get(), scratch_.data(),
                         to_int(length_bytes), MPI_BYTE, comm_),
            "MPI_Alltoall", rank_);
      detail::reduce_blocks(op.type, op.reduce_op, scratch_.data(), length_bytes, world_size_,
                            length, receive + begin * element_bytes);
    }
  }

  // A reduce-scatter over world_size near-equal parts of each chunk, then an in-place
  // all-gather of the reduced parts: every element is reduced once, by one rank, in rank order,
  // so all ranks hold the same bits, the same bits reduce_scatter + all_gather give.
  void run_all_reduce(const Op& op) {
    const std::int64_t element_bytes = size_bytes(op.type);
    // Elements per round: about chunk_bytes per part, within MPI's int byte offsets.
    const std::int64_t round_elements = std::clamp<std::int64_t>(
        chunk_bytes_ / element_bytes * world_size_, world_size_, INT_MAX / 2 / element_bytes);
    const std::int64_t first_round = std::min(round_elements, op.count);
    reserve_scratch((first_round + world_size_ - 1) / world_size_ * world_size_ * element_bytes);
    auto* data = static_cast<std::byte*>(op.receive);
    for (std::int64_t begin = 0; begin < op.count; begin += round_elements) {
      const std::int64_t length = std::min(round_elements, op.count - begin);
      std::byte* round = data + begin * element_bytes;
      for (int part = 0; part < world_size_; ++part) {
        const std::int64_t part_begin = length * part / world_size_;
        const std::int64_t part_end = length * (part + 1) / world_size_;
        send_offsets_[part] = to_int(part_begin * element_bytes);
        send_counts_[part] = to_int((part_end - part_begin) * element_bytes);
      }
      const int mine_bytes = send_counts_[rank_];
      for (int peer = 0; peer < world_size_; ++peer) {
        receive_counts_[peer] = mine_bytes;
        receive_offsets_[peer] = peer * mine_bytes;
      }
      check(MPI_Alltoallv(round, send_counts_.items().data(), send_offsets_.items().data(),
                          MPI_BYTE, scratch_.data(), receive_counts_.items().data(),
                          receive_offsets_.items().data(), MPI_BYTE, comm_),
            "MPI_Alltoallv", rank_);
      detail::reduce_blocks(op.type, op.reduce_op, scratch_.data(), mine_bytes, world_size_,
                            mine_bytes / element_bytes, round + send_offsets_[rank_]);
      check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, round, send_counts_.items().data(),
                           send_offsets_.items().data(), MPI_BYTE, comm_),
            "MPI_Allgatherv", rank_);
    }
  }

  void run_broadcast(const Op& op) {
    const std::int64_t bytes = op.count * size_bytes(op.type);
    auto* data = static_cast<std::byte*>(op.receive);
    for (std::int64_t offset = 0; offset < bytes; offset += chunk_bytes_) {
      const int length = to_int(std::min(chunk_bytes_, bytes - offset));
      check(MPI_Bcast(data + offset, length, MPI_BYTE, op.root, comm_), "MPI_Bcast", rank_);
    }
  }

  // Grows the scratch to `bytes` the first time a collective needs that much; it never shrinks,
  // so steady-state steps do not allocate.
  void reserve_scratch(std::int64_t bytes) {
    if (static_cast<std::int64_t>(scratch_.size()) < bytes) {
      scratch_.resize(static_cast<std::size_t>(bytes));
    }
  }

  World& world_;
  const std::int64_t chunk_bytes_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm barrier_comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int world_size_ = 1;

  std::mutex barrier_mutex_;

  std::mutex mutex_;
  std::condition_variable turn_changed_;
  std::uint64_t next_ticket_ = 0;    // guarded by mutex_: the ticket of the next enqueue
  std::uint64_t turn_ = 0;           // guarded by mutex_: the ticket that may run now
  std::set<std::uint64_t> dropped_;  // guarded by mutex_: released before their turn

  // Touched only by the collective that holds the turn.
  std::vector<std::byte> scratch_;
  // Bytes and byte offsets by rank, for MPI's v-collectives.
  base::ByIndex<int> send_counts_;
  base::ByIndex<int> send_offsets_;
  base::ByIndex<int> receive_counts_;
  base::ByIndex<int> receive_offsets_;
};

}  // namespace

std::unique_ptr<Comm> create_mpi_comm(World& world, const MpiCommOptions& options) {
  return std::make_unique<MpiComm>(world, options);
}

}  // namespace strata::gpu::host

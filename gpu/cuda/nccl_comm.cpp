// gpu::Comm on NCCL for CUDA devices, several ranks under MPI.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <mutex>
#include <stdexcept>
#include <string>

#include "base/assert.h"
#include "base/log.h"
#include "gpu/cuda/backend.h"
#include "gpu/cuda/cuda_check.h"
#include "gpu/cuda/cuda_device.h"
#include "gpu/cuda/cuda_stream.h"

namespace strata::gpu::cuda {
namespace {

// Throws naming the call, NCCL's text for the result and its last error message (which says
// which peer or transport failed).
void check_nccl(ncclResult_t result, const char* call, int rank) {
  if (result == ncclSuccess) return;
  throw std::runtime_error("gpu comm: " + std::string(call) + " failed on rank " +
                           std::to_string(rank) + ": " + ncclGetErrorString(result) + " (" +
                           ncclGetLastError(nullptr) + ")");
}

void check_mpi(int result, const char* call, int rank) {
  if (result == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(result, text, &length);
  throw std::runtime_error("gpu comm: " + std::string(call) + " failed on rank " +
                           std::to_string(rank) + ": " +
                           std::string(text, length > 0 ? length : 0));
}

ncclDataType_t to_nccl(DataType type) {
  switch (type) {
    case DataType::float32:
      return ncclFloat32;
    case DataType::bfloat16:
      return ncclBfloat16;
    case DataType::float16:
      return ncclFloat16;
    case DataType::int32:
      return ncclInt32;
    case DataType::int64:
      return ncclInt64;
    case DataType::uint8:
      return ncclUint8;
  }
  STRATA_ASSERT(false);
  return ncclFloat32;
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
  }
  STRATA_ASSERT(false);
  return ncclSum;
}

// One NCCL communicator over the World's ranks, on one CUDA device per rank. NCCL runs the
// collectives of one communicator in the order they were issued, whichever streams they were
// issued on, which is the Comm contract's order; the mutex keeps the issue order of concurrent
// callers consistent (NCCL calls on one communicator are not thread-safe).
//
// Differences from the MPI backend's reduction contract, owed a check on a GPU machine: NCCL
// sums in its own ring/tree order (the same bits on every rank, but not rank 0 first), bf16 and
// fp16 accumulate in their own type, and avg is NCCL's (sum times 1/world_size for floats).
class NcclComm final : public Comm {
 public:
  NcclComm(World& world, CudaDevice& device) : world_(world), device_index_(device.index()) {
    STRATA_ASSERT(world.uses_mpi());
    // barrier() runs on its own communicator, from the caller's thread.
    MPI_Comm_dup(MPI_COMM_WORLD, &barrier_comm_);
    MPI_Comm_set_errhandler(barrier_comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(barrier_comm_, &rank_);
    MPI_Comm_size(barrier_comm_, &world_size_);
    ncclUniqueId id{};
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", rank_);
    check_mpi(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, barrier_comm_), "MPI_Bcast(ncclUniqueId)",
              rank_);
    use_device(device_index_);
    check_nccl(ncclCommInitRank(&comm_, world_size_, id, rank_), "ncclCommInitRank", rank_);
    world_.add_comm();
    base::logger("gpu").debug("nccl comm: rank={} world_size={} device={}", rank_, world_size_,
                              device_index_);
  }

  ~NcclComm() override {
    // ncclCommFinalize waits for the collectives still queued (blocking communicator), as the
    // contract's destructor does.
    cudaError_t device_status = cudaSetDevice(device_index_);
    ncclResult_t result = ncclCommFinalize(comm_);
    if (result == ncclSuccess) result = ncclCommDestroy(comm_);
    if (result != ncclSuccess || device_status != cudaSuccess) {
      base::logger("gpu").error("nccl comm teardown on rank {}: {}", rank_,
                                ncclGetErrorString(result));
    }
    MPI_Comm_free(&barrier_comm_);
    world_.remove_comm();
  }

  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string_view backend() const override { return "nccl"; }

  void all_gather(Stream& stream, const void* send, void* receive, std::int64_t count_per_rank,
                  DataType type) override {
    begin_collective(CollectiveKind::all_gather, send, receive, count_per_rank, type);
    if (count_per_rank == 0) return;
    std::lock_guard lock(mutex_);
    use_device(device_index_);
    check_nccl(ncclAllGather(send, receive, static_cast<std::size_t>(count_per_rank), to_nccl(type),
                             comm_, handle(stream)),
               "ncclAllGather", rank_);
  }

  void reduce_scatter(Stream& stream, const void* send, void* receive, std::int64_t count_per_rank,
                      DataType type, ReduceOp op) override {
    begin_collective(CollectiveKind::reduce_scatter, send, receive, count_per_rank, type);
    if (count_per_rank == 0) return;
    std::lock_guard lock(mutex_);
    use_device(device_index_);
    check_nccl(ncclReduceScatter(send, receive, static_cast<std::size_t>(count_per_rank),
                                 to_nccl(type), to_nccl(op), comm_, handle(stream)),
               "ncclReduceScatter", rank_);
  }

  void all_reduce(Stream& stream, void* data, std::int64_t count_elements, DataType type,
                  ReduceOp op) override {
    begin_collective(CollectiveKind::all_reduce, data, data, count_elements, type);
    if (count_elements == 0) return;
    std::lock_guard lock(mutex_);
    use_device(device_index_);
    check_nccl(ncclAllReduce(data, data, static_cast<std::size_t>(count_elements), to_nccl(type),
                             to_nccl(op), comm_, handle(stream)),
               "ncclAllReduce", rank_);
  }

  void broadcast(Stream& stream, void* data, std::int64_t count_elements, DataType type,
                 int root) override {
    begin_collective(CollectiveKind::broadcast, data, data, count_elements, type, root);
    if (count_elements == 0) return;
    std::lock_guard lock(mutex_);
    use_device(device_index_);
    check_nccl(ncclBroadcast(data, data, static_cast<std::size_t>(count_elements), to_nccl(type),
                             root, comm_, handle(stream)),
               "ncclBroadcast", rank_);
  }

  void barrier() override {
    std::lock_guard lock(barrier_mutex_);
    check_mpi(MPI_Barrier(barrier_comm_), "MPI_Barrier", rank_);
  }

 private:
  // The stream for one collective, drawn on its timeline row (used inside the call's expression:
  // CudaStream::Traced).
  static CudaStream::Traced handle(Stream& stream) {
    return as_cuda_stream(stream).traced("collective");
  }

  World& world_;
  int device_index_;
  int rank_ = 0;
  int world_size_ = 1;
  MPI_Comm barrier_comm_ = MPI_COMM_NULL;
  ncclComm_t comm_ = nullptr;
  std::mutex mutex_;
  std::mutex barrier_mutex_;
};

}  // namespace

std::unique_ptr<Comm> create_nccl_comm(World& world, Device& device) {
  return std::make_unique<NcclComm>(world, as_cuda_device(device));
}

}  // namespace strata::gpu::cuda

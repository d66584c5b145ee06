#pragma once

#include <atomic>
#include <functional>
#include <string>

namespace strata::gpu {

// The processes of one training job and this process's place among them.
//
// Started under an MPI launcher (`mpirun`, `mpiexec`, `srun`: detected from the environment the
// launcher sets, see `detect_mpi_launch`), a World initializes MPI with MPI_THREAD_MULTIPLE
// (stream worker threads call MPI while other threads do too) and finalizes it when destroyed.
// Started any other way it is a world of one process and never touches MPI, so a plain
// `strata train` needs no MPI runtime at all.
//
// One World per process, made once (in main) and destroyed last: MPI cannot be initialized again
// after it was finalized. Every Comm made from it must be destroyed before it (asserted).
class World {
 public:
  // Throws UserError when MPI cannot give MPI_THREAD_MULTIPLE (the message says how to get an MPI
  // built with thread support).
  World();
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  // This process's rank, 0 <= rank() < world_size().
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // The rank among the processes on this machine (which GPU to open), and how many there are.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // True when this World initialized MPI (or found it initialized): the job runs under an MPI
  // launcher, even with a single rank.
  bool uses_mpi() const { return uses_mpi_; }

  // The environment variable that said an MPI launcher started this process
  // ("OMPI_COMM_WORLD_SIZE", ...), or "" for a world of one without MPI.
  const std::string& launch_variable() const { return launch_variable_; }

  // Blocks until every rank has called barrier() (no-op for a world without MPI).
  void barrier() const;

  // For tools/ main, after it has printed an error that ends this rank: with several MPI ranks,
  // ends every rank of the job at once (MPI_Abort with `exit_status`; does not return), since the
  // other ranks may be waiting in a collective this rank will never join and would hang. In a
  // world of one it returns, and the caller exits as usual.
  void abort_other_ranks(int exit_status) const;

  // Comms made from this World register here so that the destructor can assert none outlives it.
  void add_comm() noexcept;
  void remove_comm() noexcept;

 private:
  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  bool uses_mpi_ = false;
  bool finalize_ = false;
  std::atomic<int> live_comms_{0};
  std::string launch_variable_;
};

// The first variable, among those MPI launchers set for each process they start, that `getenv`
// finds: OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), PMIX_RANK (PMIx: Open MPI 5, `srun
// --mpi=pmix`), PMI_SIZE (MPICH and Intel MPI's hydra, Slurm's PMI-2), MV2_COMM_WORLD_SIZE
// (MVAPICH). "" when none is set: the process was not started by an MPI launcher.
std::string detect_mpi_launch(const std::function<const char*(const char*)>& getenv);

// MPI's thread support levels, lowest first.
enum class ThreadLevel { single, funneled, serialized, multiple };

// Throws UserError unless `provided` is `multiple`: the message names the level MPI gave and says
// to use an MPI library built with MPI_THREAD_MULTIPLE support (Debian's openmpi-bin is).
void require_thread_multiple(ThreadLevel provided);

}  // namespace strata::gpu

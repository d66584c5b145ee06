#include "gpu/process_group.h"

#include <mpi.h>

#include <array>
#include <cstdlib>
#include <string>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"

namespace strata::gpu {
namespace {

// Only one World may live at a time: MPI is initialized once and finalized once per process.
std::atomic<bool> world_alive{false};

ThreadLevel thread_level_of(int mpi_level) {
  if (mpi_level >= MPI_THREAD_MULTIPLE) return ThreadLevel::multiple;
  if (mpi_level >= MPI_THREAD_SERIALIZED) return ThreadLevel::serialized;
  if (mpi_level >= MPI_THREAD_FUNNELED) return ThreadLevel::funneled;
  return ThreadLevel::single;
}

std::string_view to_string(ThreadLevel level) {
  switch (level) {
    case ThreadLevel::single:
      return "MPI_THREAD_SINGLE";
    case ThreadLevel::funneled:
      return "MPI_THREAD_FUNNELED";
    case ThreadLevel::serialized:
      return "MPI_THREAD_SERIALIZED";
    case ThreadLevel::multiple:
      return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

}  // namespace

std::string detect_mpi_launch(const std::function<const char*(const char*)>& getenv) {
  static constexpr std::array<const char*, 4> variables = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK",
                                                           "PMI_SIZE", "MV2_COMM_WORLD_SIZE"};
  for (const char* variable : variables) {
    const char* value = getenv(variable);
    if (value != nullptr && value[0] != '\0') return variable;
  }
  return "";
}

void require_thread_multiple(ThreadLevel provided) {
  if (provided == ThreadLevel::multiple) return;
  throw UserError(
      "the MPI library gave thread level " + std::string(to_string(provided)) +
          ", but strata needs MPI_THREAD_MULTIPLE: its stream threads run collectives while "
          "other threads call MPI too",
      "run with an MPI library built with thread support (Open MPI: configure "
      "--enable-mpi-thread-multiple, the default since 3.0; Debian's openmpi-bin has it), and "
      "check that no MCA setting lowers it; or run without mpirun as a single process");
}

World::World() {
  const bool other_world = world_alive.exchange(true);
  STRATA_ASSERT(!other_world);
  launch_variable_ = detect_mpi_launch([](const char* name) { return std::getenv(name); });
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (launch_variable_.empty() && initialized == 0) return;  // a world of one, no MPI

  if (initialized == 0) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    finalize_ = true;
    if (provided < MPI_THREAD_MULTIPLE) {
      MPI_Finalize();
      world_alive = false;
      require_thread_multiple(thread_level_of(provided));
    }
  } else {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      world_alive = false;
      require_thread_multiple(thread_level_of(provided));
    }
  }
  uses_mpi_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  // The ranks that share this machine's memory are the ranks that share its GPUs.
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);
  if (rank_ == 0) {
    base::logger("gpu").info("world: mpi ranks={} launcher_variable={}", world_size_,
                             launch_variable_.empty() ? "none" : launch_variable_);
  }
}

World::~World() {
  STRATA_ASSERT(live_comms_.load() == 0);
  if (finalize_) MPI_Finalize();
  world_alive = false;
}

void World::barrier() const {
  if (uses_mpi_) MPI_Barrier(MPI_COMM_WORLD);
}

void World::abort_other_ranks(int exit_status) const {
  if (!uses_mpi_ || world_size_ == 1) return;
  base::logger("gpu").error("rank {} failed: ending all {} ranks", rank_, world_size_);
  MPI_Abort(MPI_COMM_WORLD, exit_status);
}

void World::add_comm() noexcept {
  ++live_comms_;
}

void World::remove_comm() noexcept {
  --live_comms_;
}

}  // namespace strata::gpu

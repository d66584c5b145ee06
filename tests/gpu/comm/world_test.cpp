// gpu::World: how a process learns it runs under an MPI launcher, its rank and local rank, and
// the error when MPI cannot give the thread level the stream threads need.

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "base/error.h"
#include "tests/gpu/comm/comm_test_util.h"

namespace strata::gpu::testing {
namespace {

TEST(World, RankAndSizesAreConsistent) {
  const World& world = test_world();
  EXPECT_GE(world.rank(), 0);
  EXPECT_LT(world.rank(), world.world_size());
  EXPECT_GE(world.local_rank(), 0);
  EXPECT_LT(world.local_rank(), world.local_size());
  EXPECT_LE(world.local_size(), world.world_size());
}

TEST(World, MatchesWhatTheLauncherSays) {
  const World& world = test_world();
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (size == nullptr) {
    EXPECT_FALSE(world.uses_mpi());
    EXPECT_EQ(world.world_size(), 1);
    EXPECT_EQ(world.rank(), 0);
    EXPECT_EQ(world.launch_variable(), "");
    return;
  }
  EXPECT_TRUE(world.uses_mpi());
  EXPECT_EQ(world.launch_variable(), "OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(world.world_size(), std::stoi(size));
  EXPECT_EQ(world.rank(), std::stoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  // mpirun puts every rank of this test on this one machine.
  EXPECT_EQ(world.local_size(), world.world_size());
  EXPECT_EQ(world.local_rank(), std::stoi(std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")));
}

TEST(World, DetectsEachLauncherFromItsEnvironment) {
  const auto detect = [](std::map<std::string, std::string> environment) {
    return detect_mpi_launch([&environment](const char* name) -> const char* {
      auto found = environment.find(name);
      return found == environment.end() ? nullptr : found->second.c_str();
    });
  };
  EXPECT_EQ(detect({}), "");
  EXPECT_EQ(detect({{"HOME", "/root"}}), "");
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_SIZE", ""}}), "");
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_SIZE", "4"}}), "OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(detect({{"PMIX_RANK", "0"}}), "PMIX_RANK");
  EXPECT_EQ(detect({{"PMI_SIZE", "2"}}), "PMI_SIZE");
  EXPECT_EQ(detect({{"MV2_COMM_WORLD_SIZE", "8"}}), "MV2_COMM_WORLD_SIZE");
  EXPECT_EQ(detect({{"PMI_SIZE", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}}), "OMPI_COMM_WORLD_SIZE");
}

TEST(World, ThreadLevelBelowMultipleIsAUserErrorWithAFix) {
  EXPECT_NO_THROW(require_thread_multiple(ThreadLevel::multiple));
  for (ThreadLevel level : {ThreadLevel::single, ThreadLevel::funneled, ThreadLevel::serialized}) {
    try {
      require_thread_multiple(level);
      ADD_FAILURE() << "no error for a thread level below MPI_THREAD_MULTIPLE";
    } catch (const UserError& error) {
      EXPECT_NE(std::string(error.what()).find("MPI_THREAD_MULTIPLE"), std::string::npos);
      EXPECT_NE(std::string(error.what()).find("MPI_THREAD_"), std::string::npos);
      EXPECT_NE(error.fix().find("thread"), std::string::npos);
      EXPECT_EQ(error.exit_status(), 1);
    }
  }
}

TEST(World, CommBackendFollowsTheWorldAndTheDevice) {
  EXPECT_EQ(choose_comm_backend(false, 1, DeviceKind::host), CommBackend::solo);
  EXPECT_EQ(choose_comm_backend(false, 1, DeviceKind::cuda), CommBackend::solo);
  EXPECT_EQ(choose_comm_backend(true, 1, DeviceKind::host), CommBackend::mpi);
  EXPECT_EQ(choose_comm_backend(true, 4, DeviceKind::host), CommBackend::mpi);
  EXPECT_EQ(choose_comm_backend(true, 1, DeviceKind::cuda), CommBackend::solo);
#ifdef STRATA_HAVE_CUDA
  // Several ranks on CUDA devices: NCCL.
  EXPECT_EQ(choose_comm_backend(true, 4, DeviceKind::cuda), CommBackend::nccl);
#else
  try {
    (void)choose_comm_backend(true, 4, DeviceKind::cuda);
    ADD_FAILURE() << "4 ranks on CUDA devices have no backend in a build without CUDA";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find("4 MPI ranks on CUDA devices"), std::string::npos);
    EXPECT_NE(error.fix().find("CUDA_VISIBLE_DEVICES="), std::string::npos);
  }
#endif
}

TEST(World, ASoloCommCopiesWithoutMpi) {
  if (test_world().uses_mpi()) GTEST_SKIP() << "this process runs under mpirun";
  DeviceOptions options;
  options.memory_budget_bytes = std::int64_t{1} << 20;
  std::unique_ptr<Device> device = create_host_device(options);
  std::unique_ptr<Comm> comm = create_comm(test_world(), *device);
  EXPECT_EQ(comm->backend(), "solo");
  EXPECT_EQ(comm->world_size(), 1);
}

}  // namespace
}  // namespace strata::gpu::testing

// The main of the ZeRO tests: the World lives for the whole process (MPI is initialized once and
// finalized once), so it is started here rather than in a fixture. Under mpirun every rank runs
// every test in the same order; ranks other than 0 print only failures.

#include <gtest/gtest.h>

#include "tests/engine/zero/zero_test_util.h"

namespace strata::engine::zero_testing {
namespace {

gpu::World* world_instance = nullptr;

}  // namespace

gpu::World& test_world() {
  return *world_instance;
}

}  // namespace strata::engine::zero_testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  strata::gpu::World world;
  strata::engine::zero_testing::world_instance = &world;
  if (world.rank() != 0) GTEST_FLAG_SET(brief, true);
  const int result = RUN_ALL_TESTS();
  strata::engine::zero_testing::world_instance = nullptr;
  return result;
}

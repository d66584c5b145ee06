// ZeRO offload settings a user can get wrong: each a UserError naming the cause and the fix.
// They run on a world of one in every process (Ranks::local), since the engine refuses them
// before any collective.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.h"
#include "engine/config/config_error.h"
#include "tests/engine/zero/zero_test_util.h"

namespace strata::engine::zero_testing {
namespace {

using ::testing::HasSubstr;

nlohmann::json stage3_config(const nlohmann::json& offload_param,
                             const nlohmann::json& offload_optimizer) {
  nlohmann::json config = base_config(2);
  config["zero_optimization"] = {
      {"stage", 3}, {"offload_param", offload_param}, {"offload_optimizer", offload_optimizer}};
  config["strata"]["job_name"] = job_name_for_test();
  return config;
}

// The cause and the fix together, as the CLI prints them.
std::string message_of(const nlohmann::json& config) {
  try {
    train(config, Ranks::local, 1);
  } catch (const UserError& error) {
    return std::string(error.what()) + "\n" + error.fix();
  }
  ADD_FAILURE() << "expected a UserError";
  return "";
}

// A missing nvme_path is made (as DeepSpeed's swappers make theirs); one that cannot be, because
// a file stands where a folder of it would go, is named with the file in its way.
TEST(ZeroErrors, NvmePathThatCannotBeMadeIsNamed) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("strata-zero-test-file-" + std::to_string(::getpid()));
  std::ofstream(file) << "x";
  const std::string blocked = (file / "swap").string();
  const std::string message = message_of(stage3_config(offload_section("nvme", blocked, true),
                                                       offload_section("nvme", blocked, false)));
  std::filesystem::remove(file);
  EXPECT_THAT(message, HasSubstr(blocked));
  EXPECT_THAT(message, HasSubstr(file.string() + " is not a directory"));
  EXPECT_THAT(message, HasSubstr("nvme_path"));
}

TEST(ZeroErrors, Bf16MasterWeightsWithoutAnOffloadedOptimizerNamesBothKeys) {
  nlohmann::json config = base_config(2);
  config["zero_optimization"] = {{"stage", 2}};
  config["bf16"]["bf16_master_weights_and_grads"] = true;
  const std::string message = message_of(config);
  EXPECT_THAT(message, HasSubstr("bf16_master_weights_and_grads"));
  EXPECT_THAT(message, HasSubstr("offload_optimizer"));
}

TEST(ZeroErrors, OverlapOptimizerWithoutAnOffloadedOptimizerNamesBothKeys) {
  nlohmann::json config = base_config(2);
  config["zero_optimization"] = {{"stage", 2}};
  config["strata"]["overlap_optimizer"] = true;
  const std::string message = message_of(config);
  EXPECT_THAT(message, HasSubstr("overlap_optimizer"));
  EXPECT_THAT(message, HasSubstr("offload_optimizer"));
}

TEST(ZeroErrors, NvmeWithoutNvmePathIsAConfigErrorNamingTheKey) {
  nlohmann::json config =
      stage3_config(offload_section("nvme", "", true), offload_section("nvme", "", false));
  config["zero_optimization"]["offload_param"].erase("nvme_path");
  try {
    parse_config(config);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("zero_optimization.offload_param.nvme_path"));
  }
}

// Parameters on NVMe need the optimizer offloaded too (its step writes the new bf16 weights to
// the parameter tier); the refusal names both keys.
TEST(ZeroErrors, ParamsOnNvmeWithOptimizerOnDeviceIsRefusedNamingBothKeys) {
  TempDirectory swap;
  const std::string message =
      message_of(stage3_config(offload_section("nvme", swap.string(), true), {{"device", "none"}}));
  EXPECT_THAT(message, HasSubstr("offload_param"));
  EXPECT_THAT(message, HasSubstr("offload_optimizer"));
}

}  // namespace
}  // namespace strata::engine::zero_testing

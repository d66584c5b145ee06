// `strata config check` as a user runs it: the real binary, its exit codes and its --json.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/engine/config_test_util.h"

namespace strata::engine {
namespace {

using ::testing::HasSubstr;

struct RunResult {
  int exit_status = -1;
  std::string out;  // stdout only; stderr goes to the test log
};

RunResult run_strata(const std::string& arguments) {
  std::string command = std::string(STRATA_BINARY) + " " + arguments + " 2>/dev/null";
  RunResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe))
    result.out.append(buffer.data(), n);
  int status = pclose(pipe);
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string fixture_arg(std::string_view kind, std::string_view name) {
  return testing::fixture(kind, name).string();
}

TEST(ConfigCheckCommand, ValidConfigExitsZeroAndPrintsItResolved) {
  RunResult result = run_strata("config check " + fixture_arg("good", "hf_zero3_auto.json"));
  EXPECT_EQ(result.exit_status, 0);
  EXPECT_THAT(result.out, HasSubstr("valid (ZeRO stage 3"));
  EXPECT_THAT(result.out, HasSubstr("\"stage3_prefetch_bucket_size\": 943718"));
}

TEST(ConfigCheckCommand, AnAccelerateConfigIsCheckedWithItsNotes) {
  RunResult result =
      run_strata("config check --json --world-size 1 " +
                 fixture_arg("accelerate", "huggingface_alignment_handbook_deepspeed_zero3.yaml"));
  EXPECT_EQ(result.exit_status, 0);
  nlohmann::json out = nlohmann::json::parse(result.out);
  EXPECT_EQ(out["valid"], true);
  EXPECT_EQ(out["config"]["zero_optimization"]["stage"], 3);
  EXPECT_EQ(out["config"]["bf16"]["enabled"], true);
  bool names_the_micro_batch = false;
  for (const auto& note : out["notes"])
    names_the_micro_batch =
        names_the_micro_batch ||
        note.get<std::string>().find("set strata.micro_batch_size") != std::string::npos;
  EXPECT_TRUE(names_the_micro_batch) << out["notes"].dump();
}

TEST(ConfigCheckCommand, JsonOutputParsesAndHoldsTheResolvedConfig) {
  RunResult result = run_strata("config check --json --world-size 4 " +
                                fixture_arg("good", "ds_zero3_offload_tutorial.json"));
  EXPECT_EQ(result.exit_status, 0);
  nlohmann::json out = nlohmann::json::parse(result.out);
  EXPECT_EQ(out["valid"], true);
  EXPECT_EQ(out["world_size"], 4);
  EXPECT_EQ(out["config"]["gradient_accumulation_steps"], 2);
  EXPECT_EQ(out["config"]["zero_optimization"]["offload_param"]["device"], "cpu");
  // The resolved config is itself a valid config that loads to the same values.
  EXPECT_EQ(to_json(parse_config(out["config"], 4).config), out["config"]);
}

TEST(ConfigCheckCommand, InvalidConfigExitsOneWithEveryError) {
  RunResult text = run_strata("config check " + fixture_arg("bad", "many_problems.json"));
  EXPECT_EQ(text.exit_status, 1);
  RunResult json = run_strata("config check --json " + fixture_arg("bad", "many_problems.json"));
  EXPECT_EQ(json.exit_status, 1);
  nlohmann::json out = nlohmann::json::parse(json.out);
  EXPECT_EQ(out["valid"], false);
  ASSERT_EQ(out["errors"].size(), 4u);
  EXPECT_THAT(out["errors"][0].get<std::string>(), HasSubstr("train_micro_batch_size_per_gpu"));
}

TEST(ConfigCheckCommand, MissingFileExitsOne) {
  EXPECT_EQ(run_strata("config check /nonexistent.json").exit_status, 1);
}

TEST(ConfigCheckCommand, BadUsageExitsTwo) {
  EXPECT_EQ(run_strata("config check").exit_status, 2);
  EXPECT_EQ(run_strata("config check --world-size 0 x.json").exit_status, 2);
}

TEST(ConfigCheckCommand, ShippedConfigsAreValid) {
  for (const char* name :
       {"zero3_nvme_offload.json", "zero3_cpu_offload.json", "zero2_cpu_offload.json"}) {
    std::string path = std::string(STRATA_SOURCE_DIR) + "/configs/" + name;
    EXPECT_EQ(run_strata("config check " + path).exit_status, 0) << name;
  }
}

}  // namespace
}  // namespace strata::engine

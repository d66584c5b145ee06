// `strata config check` as a user runs it: the real binary, its exit codes and its --json.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/engine/config/config_test_util.h"

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

// A fresh folder for one test's config (and what train writes), removed at the end of the test.
class Scratch {
 public:
  Scratch() {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    folder_ = std::filesystem::temp_directory_path() /
              fmt::format("strata-config-cli-{}-{}", getpid(), test->name());
    std::filesystem::remove_all(folder_);
    std::filesystem::create_directories(folder_);
  }
  ~Scratch() {
    std::error_code ignored;
    std::filesystem::remove_all(folder_, ignored);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  const std::filesystem::path& folder() const { return folder_; }
  // Writes the config and returns its path.
  std::string config(const std::string& json) const {
    std::ofstream(folder_ / "run.json") << json;
    return (folder_ / "run.json").string();
  }

 private:
  std::filesystem::path folder_;
};

// A config of one tiny layer, so that `strata train` is quick; `sections` are more top-level
// keys, `strata` more keys of the strata section.
std::string tiny(const std::string& sections, const std::string& strata = "") {
  return fmt::format(R"({{"train_micro_batch_size_per_gpu": 1, {}
    "strata": {{"model": {{"n_layer": 1, "n_head": 1, "d_model": 16, "seq_len": 8}} {}}}}})",
                     sections, strata);
}

// What `strata config check --json` found wrong ("" when valid).
std::string check_errors(const std::string& path, const std::string& flags = "") {
  const RunResult result = run_strata("config check --json " + flags + " " + path);
  const nlohmann::json out = nlohmann::json::parse(result.out);
  if (out["valid"] == true) {
    EXPECT_EQ(result.exit_status, 0);
    return "";
  }
  EXPECT_EQ(result.exit_status, 1);
  return out["errors"].dump();
}

// `strata config check` runs what `strata train` runs before its engine: what train refuses there,
// check refuses too, naming the file.
TEST(ConfigCheckCommand, RefusesWhatTrainRefusesNamingTheFile) {
  Scratch scratch;
  const std::string missing_data =
      scratch.config(tiny("", R"(, "data": {"path": "no-such-corpus.txt"})"));
  EXPECT_THAT(check_errors(missing_data), HasSubstr(missing_data + ": strata.data.path"));
  EXPECT_EQ(run_strata("train --steps 1 --config " + missing_data).exit_status, 2);

  const std::string under_a_file = scratch.config(tiny(R"("zero_optimization": {"stage": 3,
      "offload_param": {"device": "nvme", "nvme_path": "/proc/version/swap"}},)"));
  EXPECT_THAT(
      check_errors(under_a_file),
      HasSubstr(under_a_file + ": zero_optimization.offload_param.nvme_path /proc/version/swap: "
                               "/proc/version is not a directory"));
}

// warmup_num_steps 0, and an nvme_path that does not exist yet, are accepted by check and run by
// train, which makes the folder (as DeepSpeed's swappers do).
TEST(ConfigCheckCommand, WhatCheckAcceptsTrainRuns) {
  Scratch scratch;
  const std::filesystem::path swap = scratch.folder() / "swap" / "made";
  const std::string path = scratch.config(tiny(fmt::format(
      R"("scheduler": {{"type": "WarmupLR", "params": {{"warmup_num_steps": 0}}}},
         "zero_optimization": {{"stage": 3,
           "offload_param": {{"device": "nvme", "pin_memory": false, "nvme_path": "{0}"}},
           "offload_optimizer": {{"device": "nvme", "pin_memory": false, "nvme_path": "{0}"}}}},)",
      swap.string())));
  EXPECT_EQ(check_errors(path), "");
  EXPECT_FALSE(std::filesystem::exists(swap));  // check makes nothing
  const RunResult train = run_strata("train --steps 2 --out " +
                                     (scratch.folder() / "out").string() + " --config " + path);
  EXPECT_EQ(train.exit_status, 0) << train.out;
  EXPECT_THAT(train.out, HasSubstr("trained 2 steps"));
  EXPECT_TRUE(std::filesystem::is_directory(swap));
}

// --steps, --bf16 and --fp16 resolve the config as train will run it.
TEST(ConfigCheckCommand, TakesTrainsStepsAndPrecisionFlags) {
  Scratch scratch;
  const std::string path = scratch.config(tiny(R"("bf16": {"enabled": "auto"},
      "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto",
                                                        "warmup_num_steps": "auto"}},)"));
  const RunResult result = run_strata("config check --json --steps 60 --bf16 " + path);
  ASSERT_EQ(result.exit_status, 0);
  const nlohmann::json out = nlohmann::json::parse(result.out);
  EXPECT_EQ(out["config"]["strata"]["train_steps"], 60);
  EXPECT_EQ(out["config"]["scheduler"]["params"]["total_num_steps"], 60);
  EXPECT_EQ(out["config"]["bf16"]["enabled"], true);
  EXPECT_EQ(run_strata("config check --bf16 --fp16 " + path).exit_status, 2);
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

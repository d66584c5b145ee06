// `strata train` killed with SIGKILL while it saves, as a crash or the OOM killer ends it: after
// every kill `latest` names a checkpoint that `strata ckpt inspect --verify` passes and that a
// run resumes from. The short version of scripts/ckpt_kill_loop.sh (100 kills) for the suite.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "tests/tools/run_strata.h"
#include "tests/tools/spawn_strata.h"

namespace strata::tools::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr std::uint32_t kSeed = 20250101;
constexpr int kKills = 5;
constexpr std::int64_t kSteps = 1000000;  // never reached: every run is killed

// A 434K-parameter GPT under ZeRO-3 with parameters and optimizer states on NVMe under `swap`,
// in sub-groups of 200K: a save streams 5 MiB of states out of the swap file in three
// sub-groups, and takes several times as long as a step.
std::string config_json(const fs::path& swap) {
  return fmt::format(R"({{
  "train_micro_batch_size_per_gpu": 1,
  "gradient_accumulation_steps": 1,
  "steps_per_print": 1,
  "bf16": {{"enabled": true}},
  "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-3}}}},
  "zero_optimization": {{
    "stage": 3,
    "sub_group_size": 2e5,
    "reduce_bucket_size": 1e6,
    "stage3_prefetch_bucket_size": 8e5,
    "stage3_param_persistence_threshold": 1e4,
    "offload_param": {{"device": "nvme", "nvme_path": "{0}", "pin_memory": false,
                      "buffer_count": 4, "buffer_size": 1e6, "max_in_cpu": 0}},
    "offload_optimizer": {{"device": "nvme", "nvme_path": "{0}", "pin_memory": false,
                          "buffer_count": 4}}
  }},
  "strata": {{
    "model": {{"n_layer": 2, "n_head": 4, "d_model": 128, "seq_len": 32, "vocab": 256}},
    "train_steps": {1}, "seed": 7, "job_name": "ckpt-kill-test"
  }}
}})",
                     swap.string(), kSteps);
}

// The step `latest` names (tags are global_step<N>), or 0 when there is none yet.
std::int64_t latest_step(const fs::path& save) {
  std::ifstream file(save / "latest");
  std::string tag;
  if (!(file >> tag)) return 0;
  return std::stoll(tag.substr(std::string("global_step").size()));
}

// Progress prints this for every step (steps_per_print 1) before the step's save begins.
std::string step_line(std::int64_t step) {
  return fmt::format("step {:5d}/{} |", step, kSteps);
}

class CkptKill : public ::testing::Test {
 protected:
  CkptKill() {
    fs::create_directory(swap_);
    config_ = dir_.write("config.json", config_json(swap_));
  }

  std::vector<std::string> train_arguments(std::int64_t steps) const {
    return {"train",
            "--config",
            config_.string(),
            "--steps",
            std::to_string(steps),
            "--save-dir",
            save_.string(),
            "--save-every",
            "1",
            "--keep-last",
            "2",
            "--out",
            (dir_.path() / "out").string()};
  }

  // A partial directory is there: the kill ended a save. Any stale one an earlier kill left was of
  // tag before+1, which this run saved again, removing it.
  bool saving_when_killed() const {
    for (const fs::directory_entry& entry : fs::directory_iterator(save_)) {
      if (entry.path().filename().string().ends_with(".partial")) return true;
    }
    return false;
  }

  TempDir dir_;
  fs::path swap_ = dir_.path() / "swap";
  fs::path save_ = dir_.path() / "ckpt";
  fs::path config_;
};

TEST_F(CkptKill, LatestVerifiesAndResumesAfterEveryKillMidSave) {
  std::mt19937 random(kSeed);
  std::uniform_real_distribution<double> fraction(0.0, 1.0);
  int kills_mid_save = 0;
  for (int kill = 1; kill <= kKills; ++kill) {
    SCOPED_TRACE(fmt::format("kill {} of {}, seed {}", kill, kKills, kSeed));
    const std::int64_t before = latest_step(save_);
    std::vector<std::string> arguments = train_arguments(kSteps);
    if (before > 0) arguments.insert(arguments.end(), {"--resume", save_.string()});
    SpawnedStrata child(arguments);
    // The run saves step before+1 between the lines of steps before+1 and before+2, and step
    // before+2 right after its line: the time between the lines is a save and a step, and a kill
    // a random fraction of it after the second line lands in the second save most of the time.
    ASSERT_TRUE(child.wait_for_output(step_line(before + 1), std::chrono::seconds(120)))
        << child.out() << child.err();
    const auto first = std::chrono::steady_clock::now();
    ASSERT_TRUE(child.wait_for_output(step_line(before + 2), std::chrono::seconds(120)))
        << child.out() << child.err();
    const auto period = std::chrono::steady_clock::now() - first;
    const auto delay =
        std::chrono::duration_cast<std::chrono::milliseconds>(period * fraction(random));
    // Waits for the save to end (the next step's line) or for the delay, whichever comes first.
    static_cast<void>(child.wait_for_output(step_line(before + 3), delay));
    child.signal(SIGKILL);
    RunResult result = child.wait(std::chrono::seconds(120));
    ASSERT_EQ(result.exit_status, 128 + SIGKILL) << result.err;
    if (saving_when_killed()) ++kills_mid_save;

    // Step before+1's save ended before step before+2's line: latest is at least that.
    const std::int64_t after = latest_step(save_);
    EXPECT_GE(after, before + 1);
    EXPECT_TRUE(fs::exists(save_ / fmt::format("global_step{}", after) / "manifest.json"));
    RunResult verify = run_strata({"ckpt", "inspect", save_.string(), "--verify"});
    ASSERT_EQ(verify.exit_status, 0) << verify.out << verify.err;
  }
  std::cout << fmt::format("{} kills, {} mid-save (seed {})\n", kKills, kills_mid_save, kSeed);

  // One more step from latest, to a clean exit: the resume loads it and the swap files every
  // killed run left are gone.
  const std::int64_t last = latest_step(save_);
  std::vector<std::string> arguments = train_arguments(last + 1);
  arguments.insert(arguments.end(), {"--resume", save_.string()});
  RunResult resumed = run_strata(arguments);
  ASSERT_EQ(resumed.exit_status, 0) << resumed.err;
  EXPECT_THAT(resumed.err,
              HasSubstr(fmt::format("resumed from {} (step {})",
                                    (save_ / fmt::format("global_step{}", last)).string(), last)));
  EXPECT_THAT(resumed.out, HasSubstr("trained 1 steps"));
  EXPECT_EQ(latest_step(save_), last + 1);
  EXPECT_TRUE(fs::is_empty(swap_));
}

}  // namespace
}  // namespace strata::tools::testing

// `strata train` killed with SIGKILL while it saves, as a crash or the OOM killer ends it: after
// every kill `latest` names a checkpoint that `strata ckpt inspect --verify` passes and that a
// run resumes from. Each kill lands in a save: the moment the save's partial directory appears
// (inotify tells), not a time picked from the clock. The short version of
// scripts/ckpt_kill_loop.sh (100 kills at random times) for the suite.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/tools/run_strata.h"
#include "tests/tools/spawn_strata.h"

namespace strata::tools::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

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

// Watches a directory for entries created in it or moved into it (inotify), so that a test can
// act the moment one appears instead of polling or sleeping.
class DirectoryWatch {
 public:
  explicit DirectoryWatch(const fs::path& directory)
      : fd_(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK)) {
    if (fd_ < 0 || ::inotify_add_watch(fd_, directory.c_str(), IN_CREATE | IN_MOVED_TO) < 0)
      throw std::runtime_error(
          fmt::format("inotify on {}: {}", directory.string(), std::strerror(errno)));
  }
  ~DirectoryWatch() { ::close(fd_); }
  DirectoryWatch(const DirectoryWatch&) = delete;
  DirectoryWatch& operator=(const DirectoryWatch&) = delete;

  // Waits until an entry named `name` is created (true), or `timeout` passes (false).
  bool wait_for(const std::string& name, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    alignas(inotify_event) std::array<char, 4096> buffer{};
    for (;;) {
      const ssize_t got = ::read(fd_, buffer.data(), buffer.size());
      for (ssize_t at = 0; at < got;) {
        const auto* event = reinterpret_cast<const inotify_event*>(buffer.data() + at);
        if (event->len > 0 && name == event->name) return true;
        at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      }
      if (got > 0) continue;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd ready{fd_, POLLIN, 0};
      ::poll(&ready, 1, static_cast<int>(left.count()));
    }
  }

 private:
  int fd_;
};

// The directory a save of `step` writes into until it is complete
// (engine/checkpoint/save_directory.h).
std::string partial_name(std::int64_t step) {
  return fmt::format(".global_step{}.partial", step);
}

class CkptKill : public ::testing::Test {
 protected:
  CkptKill() {
    fs::create_directory(swap_);
    fs::create_directory(save_);
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

  TempDir dir_;
  fs::path swap_ = dir_.path() / "swap";
  fs::path save_ = dir_.path() / "ckpt";
  fs::path config_;
};

TEST_F(CkptKill, LatestVerifiesAndResumesAfterEveryKillMidSave) {
  int kills_mid_save = 0;
  for (int kill = 1; kill <= kKills; ++kill) {
    SCOPED_TRACE(fmt::format("kill {} of {}", kill, kKills));
    const std::int64_t before = latest_step(save_);
    std::vector<std::string> arguments = train_arguments(kSteps);
    if (before > 0) arguments.insert(arguments.end(), {"--resume", save_.string()});
    // The run saves every step: step before+1's save completes, then step before+2's begins by
    // making its partial directory, and is killed at once, while it writes its states.
    DirectoryWatch watch(save_);
    SpawnedStrata child(arguments);
    ASSERT_TRUE(watch.wait_for(partial_name(before + 2), std::chrono::seconds(120)))
        << child.out() << child.err();
    child.signal(SIGKILL);
    RunResult result = child.wait(std::chrono::seconds(120));
    ASSERT_EQ(result.exit_status, 128 + SIGKILL) << result.err;
    if (fs::exists(save_ / partial_name(before + 2))) ++kills_mid_save;

    // The kill left step before+2's save partial: latest is step before+1's, whole.
    EXPECT_EQ(latest_step(save_), before + 1);
    EXPECT_TRUE(fs::exists(save_ / fmt::format("global_step{}", before + 1) / "manifest.json"));
    RunResult verify = run_strata({"ckpt", "inspect", save_.string(), "--verify"});
    ASSERT_EQ(verify.exit_status, 0) << verify.out << verify.err;
  }
  EXPECT_EQ(kills_mid_save, kKills);

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

// `strata train` with pin_memory, run as a user runs it: what the kernel lets the process lock
// decides (RLIMIT_MEMLOCK, lifted by CAP_IPC_LOCK); pinning asked for and not to be had trains
// unpinned with one warning, or is refused under strata.require_pinned_memory; pinning is on
// unless a config turns it off, as in DeepSpeed, and the same fallback serves a config without
// the key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>

#include "gpu/pinned_limit.h"
#include "tests/tools/memlock_run.h"
#include "tests/tools/run_strata.h"

namespace strata::tools::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// What the child processes below may lock: room for the step's two pinned pages, far below what
// the offloaded run pins.
constexpr std::int64_t kSmallLimitBytes = 1 << 20;
// The warning's own words, counted to hold it to one line per run.
constexpr const char* kUnpinned = "training from unpinned host memory";

// A stage-3 run with parameters and optimizer states on NVMe under `swap`, for one step. Its
// page-locked need, when `pin` asks, is about 25 MiB: the optimizer's four swap buffers of a
// 430,000-element sub-group (12 bytes an element) and the parameter and gradient buffers.
std::string offloaded_config(const std::string& swap, std::optional<bool> pin,
                             std::optional<bool> require_pinned = std::nullopt) {
  const std::string pin_key = pin ? fmt::format(R"(, "pin_memory": {})", *pin) : "";
  const std::string require_key =
      require_pinned ? fmt::format(R"(, "require_pinned_memory": {})", *require_pinned) : "";
  return fmt::format(R"({{
  "train_micro_batch_size_per_gpu": 2,
  "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-3}}}},
  "bf16": {{"enabled": true}},
  "zero_optimization": {{"stage": 3,
    "offload_param": {{"device": "nvme", "nvme_path": "{0}"{1}}},
    "offload_optimizer": {{"device": "nvme", "nvme_path": "{0}"{1}}}}},
  "strata": {{"model": {{"n_layer": 2, "n_head": 2, "d_model": 128, "seq_len": 16, "vocab": 256}},
              "train_steps": 1, "seed": 7{2}}}
}})",
                     swap, pin_key, require_key);
}

std::vector<std::string> train_arguments(const TempDir& dir, const std::string& config) {
  const std::filesystem::path file = dir.write("config.json", config);
  return {"train", "--config", file.string(), "--out", (dir.path() / "out").string()};
}

int count(const std::string& text, const std::string& part) {
  int found = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1))
    ++found;
  return found;
}

// Root with CAP_IPC_LOCK may lock past RLIMIT_MEMLOCK (mlock's rule), so a run that pins more
// than the limit trains pinned, without a word about it.
TEST(PinnedMemoryCommand, PinsPastTheRlimitWithCapIpcLock) {
  const gpu::PinnedLimit limit = gpu::pinned_limit();
  if (!limit.cap_ipc_lock || !limit.rlimit_bytes || *limit.rlimit_bytes >= (16 << 20))
    GTEST_SKIP() << "needs CAP_IPC_LOCK and an RLIMIT_MEMLOCK below 16 MiB; here "
                 << limit.describe();
  TempDir dir;
  const RunResult result =
      run_strata(train_arguments(dir, offloaded_config(dir.path().string(), true)));
  ASSERT_EQ(result.exit_status, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("trained 1 steps"));
  EXPECT_THAT(result.err, Not(HasSubstr(kUnpinned)));
}

// Without CAP_IPC_LOCK and with a 1 MiB limit the kernel refuses the lock: the run trains from
// unpinned memory and says so once, with how much was asked, the limit and the fixes.
TEST(PinnedMemoryCommand, TrainsUnpinnedWithOneWarningWhenTheMemoryCannotBeLocked) {
  TempDir dir;
  const RunResult result = run_strata_locking_at_most(
      kSmallLimitBytes, train_arguments(dir, offloaded_config(dir.path().string(), true)));
  ASSERT_EQ(result.exit_status, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("trained 1 steps"));
  EXPECT_EQ(count(result.err, kUnpinned), 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("zero_optimization.offload_param.pin_memory and "
                                    "zero_optimization.offload_optimizer.pin_memory ask for"));
  EXPECT_THAT(result.err, HasSubstr("may lock 1.00 MiB (RLIMIT_MEMLOCK, 1024 KiB"));
  EXPECT_THAT(result.err, HasSubstr("ulimit -l"));
  EXPECT_THAT(result.err, HasSubstr("CAP_IPC_LOCK"));
  EXPECT_THAT(result.err, HasSubstr("set pin_memory to false"));
  EXPECT_THAT(result.err, HasSubstr("strata.require_pinned_memory"));
}

// strata.require_pinned_memory: the same run is refused, naming cause and fix.
TEST(PinnedMemoryCommand, RequirePinnedMemoryRefusesWhatCannotBeLocked) {
  TempDir dir;
  const RunResult result = run_strata_locking_at_most(
      kSmallLimitBytes, train_arguments(dir, offloaded_config(dir.path().string(), true, true)));
  EXPECT_EQ(result.exit_status, 1) << result.err;
  EXPECT_THAT(result.err, HasSubstr("strata.require_pinned_memory is true"));
  EXPECT_THAT(result.err, HasSubstr("may lock 1.00 MiB"));
  EXPECT_THAT(result.err, HasSubstr("fix:"));
  EXPECT_THAT(result.err, HasSubstr("ulimit -l"));
  EXPECT_THAT(result.err, Not(HasSubstr(kUnpinned)));
  EXPECT_THAT(result.out, Not(HasSubstr("trained")));
}

// Without a pin_memory key the run pins (DeepSpeed's default), and under a small limit it trains
// unpinned with the one warning; pin_memory false pins nothing and says nothing.
TEST(PinnedMemoryCommand, WithoutAPinKeyItPinsAndFallsBackUnderASmallLimit) {
  TempDir dir;
  const RunResult result = run_strata_locking_at_most(
      kSmallLimitBytes, train_arguments(dir, offloaded_config(dir.path().string(), std::nullopt)));
  ASSERT_EQ(result.exit_status, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("trained 1 steps"));
  EXPECT_EQ(count(result.err, kUnpinned), 1) << result.err;
  TempDir off;
  const RunResult unpinned = run_strata_locking_at_most(
      kSmallLimitBytes, train_arguments(off, offloaded_config(off.path().string(), false)));
  ASSERT_EQ(unpinned.exit_status, 0) << unpinned.err;
  EXPECT_THAT(unpinned.err, Not(HasSubstr(kUnpinned)));
}

// An Accelerate config has no pin_memory key: with NVMe offload it trains under a small limit,
// unpinned, with the one warning.
TEST(PinnedMemoryCommand, AccelerateConfigWithNvmeOffloadTrainsUnderASmallLimit) {
  TempDir dir;
  const std::string swap = dir.path().string();
  const std::filesystem::path file = dir.write("accelerate.yaml", fmt::format(R"(
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
mixed_precision: bf16
deepspeed_config:
  zero_stage: 3
  offload_optimizer_device: nvme
  offload_optimizer_nvme_path: {0}
  offload_param_device: nvme
  offload_param_nvme_path: {0}
strata:
  model: {{n_layer: 2, n_head: 2, d_model: 128, seq_len: 16, vocab: 256}}
  train_steps: 1
  seed: 7
)",
                                                                              swap));
  const RunResult result = run_strata_locking_at_most(
      kSmallLimitBytes,
      {"train", "--config", file.string(), "--out", (dir.path() / "out").string()});
  ASSERT_EQ(result.exit_status, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("trained 1 steps"));
  EXPECT_EQ(count(result.err, kUnpinned), 1) << result.err;
}

}  // namespace
}  // namespace strata::tools::testing

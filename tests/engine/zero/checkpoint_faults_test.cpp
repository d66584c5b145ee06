// Checkpoints against bad disks and bad files, through the real Engine (docs/checkpoints.md):
//
// - Seeded faults (EIO, ENOSPC, short transfers, flipped bits) in the swap files' and the
//   checkpoints' I/O of a run that saves every few steps: for each seed the run either produces
//   the fault-free result bit for bit or stops with a named error, holding no device or pinned
//   memory and leaving no swap files; resuming from its last checkpoint then reaches the
//   fault-free result bit for bit. A seed that fails prints itself, so it replays.
// - Every damaged or mismatched checkpoint is refused before training, naming the file (and the
//   tensor) and the fix: a flipped bit, a truncated or missing file, another model's or another
//   optimizer's checkpoint, a `latest` naming nothing.
//
// One process each: a fault on one rank of several leaves the others waiting in a collective,
// which is the launcher's to end, not the engine's.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/checkpoint/save_directory.h"
#include "tests/engine/zero/zero_test_util.h"

namespace strata::engine::zero_testing {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr int kSteps = 12;
constexpr int kSaveEvery = 4;
constexpr int kSeeds = 32;

nlohmann::json nvme_config(const std::string& swap) {
  const nlohmann::json zero = {{"stage", 3},
                               {"reduce_bucket_size", 5000},
                               {"sub_group_size", 8192},
                               {"stage3_param_persistence_threshold", 0}};
  return with_zero(base_config(2), zero, "nvme", "nvme", swap);
}

// What seed `seed` does: which I/O it hits and how.
struct SeededFault {
  IoFaults faults;
  bool in_checkpoint = false;
  std::string description;
};

SeededFault fault_for(std::uint64_t seed) {
  std::mt19937_64 random(seed);
  const bool in_checkpoint = random() % 2 == 1;
  aio::FaultPlan plan(seed);
  std::string kind;
  // A run's swap I/O is a few thousand completions; each save and load has an aio engine of its
  // own whose completions are numbered from 0, a few per state file.
  const auto index = [&] {
    return static_cast<std::int64_t>(random() % (in_checkpoint ? 8 : 400));
  };
  // An error at one completion of a save or load (numbered from 0 in each), or at random in the
  // swap I/O.
  const auto fail = [&](int errno_value) {
    if (in_checkpoint) {
      plan.fail(index(), errno_value);
    } else {
      plan.fail_randomly(0.01, errno_value);
    }
  };
  switch (random() % 4) {
    case 0:
      fail(EIO);
      kind = "EIO";
      break;
    case 1:
      fail(ENOSPC);
      kind = "ENOSPC";
      break;
    case 2:
      for (int i = 0; i < 8; ++i)
        plan.shorten(index());
      kind = "short transfers";
      break;
    default:
      for (int i = 0; i < 4; ++i)
        plan.flip_bit(index());
      kind = "flipped bits";
      break;
  }
  SeededFault fault;
  (in_checkpoint ? fault.faults.checkpoint : fault.faults.swap) = plan;
  fault.in_checkpoint = in_checkpoint;
  fault.description = "seed " + std::to_string(seed) + ": " + kind + " in " +
                      (in_checkpoint ? "checkpoint" : "swap") + " I/O";
  return fault;
}

void expect_same_bits(const std::vector<double>& losses, const std::vector<float>& params,
                      const TrainedRun& clean, int first_step) {
  ASSERT_EQ(losses.size(), static_cast<std::size_t>(kSteps - first_step + 1));
  for (int s = first_step; s <= kSteps; ++s) {
    EXPECT_EQ(losses[static_cast<std::size_t>(s - first_step)],
              clean.losses[static_cast<std::size_t>(s - 1)])
        << "step " << s;
  }
  EXPECT_TRUE(params == clean.params) << "final master parameters differ";
}

// How one seed's run ended.
enum class SeedEnd { exact, stopped };

// Seed `seed`'s fault in a 12-step run that saves every 4 steps, then the resume: the run ends
// with the fault-free bits or stops naming the fault, holding nothing; a checkpoint it left loads
// or is refused naming the file (meeting the same faults); and the resume from it gives the
// fault-free bits. Sets `refused_load` when a faulty load was refused.
SeedEnd run_seed(std::uint64_t seed, const TrainedRun& clean, bool& refused_load) {
  const SeededFault fault = fault_for(seed);
  SCOPED_TRACE(fault.description);
  TempDirectory swap;
  TempDirectory saves;
  const nlohmann::json config = nvme_config(swap.string());
  CheckpointPlan plan;
  plan.save_dir = saves.path();
  plan.save_every = kSaveEvery;
  // Every other seed has its saves made by the step before them (Engine::plan_checkpoint).
  plan.plan_ahead = seed % 2 == 0 ? 1 : 0;
  plan.faults = fault.faults;
  plan.stop_on_error = true;
  const TrainedRun faulty = train(config, Ranks::local, kSteps, 0, plan);
  EXPECT_EQ(faulty.device_bytes_left, 0);
  EXPECT_EQ(faulty.pinned_bytes_left, 0);
  EXPECT_TRUE(files_under(swap.path()).empty()) << "swap files left behind";
  std::printf("%s%s: %s\n", fault.description.c_str(), plan.plan_ahead > 0 ? ", saves planned" : "",
              faulty.error.empty() ? "the fault-free result" : faulty.error.substr(0, 160).c_str());
  if (faulty.error.empty()) {
    expect_same_bits(faulty.losses, faulty.params, clean, 1);
  } else {
    EXPECT_THAT(faulty.error, AnyOf(HasSubstr("failed"), HasSubstr("checksum")));
    if (faulty.error.find("No space left") != std::string::npos) {
      EXPECT_THAT(faulty.error_fix, HasSubstr("free space"));
    }
    if (faulty.error_fix.find("--resume") != std::string::npos) {
      EXPECT_THAT(faulty.error_fix, HasSubstr(saves.string()));
    }
  }
  const std::optional<std::string> latest = checkpoint::latest_tag(saves.path());
  refused_load = false;
  if (latest && fault.in_checkpoint) {
    // The checkpoint's reads meet the same faults: the load goes through or is refused naming
    // the file, before any step.
    CheckpointPlan faulty_load;
    faulty_load.resume_from = saves.path();
    faulty_load.faults.checkpoint = fault.faults.checkpoint;
    faulty_load.stop_on_error = true;
    const TrainedRun load = train(config, Ranks::local, kSteps, 0, faulty_load);
    if (!load.error.empty()) {
      refused_load = true;
      EXPECT_THAT(load.error, HasSubstr(".safetensors"));
      EXPECT_TRUE(load.losses.empty());
    }
  }
  // Resumed from the last checkpoint (from the start when there is none): the fault-free bits.
  CheckpointPlan resume;
  if (latest) resume.resume_from = saves.path();
  const TrainedRun resumed = train(config, Ranks::local, kSteps, 0, resume);
  const int first = latest ? std::stoi(latest->substr(std::string("global_step").size())) + 1 : 1;
  expect_same_bits(resumed.losses, resumed.params, clean, first);
  EXPECT_TRUE(files_under(swap.path()).empty()) << "swap files left behind";
  return faulty.error.empty() ? SeedEnd::exact : SeedEnd::stopped;
}

// The seeds in blocks of kSeedsPerBlock, one test each, so that ctest runs them side by side
// (each block is a test of its own in tests/engine/zero/CMakeLists.txt).
constexpr int kSeedsPerBlock = 8;
class CheckpointFaultSeeds : public ::testing::TestWithParam<int> {};

TEST_P(CheckpointFaultSeeds, EverySeedEndsExactOrNamedAndResumesExactly) {
  if (test_world().world_size() > 1) GTEST_SKIP() << "faults are tested in a world of one";
  TempDirectory clean_swap;
  const TrainedRun clean = train(nvme_config(clean_swap.string()), Ranks::local, kSteps);
  int stopped = 0;
  int exact = 0;
  int refused_loads = 0;
  const int first = GetParam() * kSeedsPerBlock + 1;
  for (int seed = first; seed < first + kSeedsPerBlock; ++seed) {
    bool refused_load = false;
    const SeedEnd end = run_seed(static_cast<std::uint64_t>(seed), clean, refused_load);
    ++(end == SeedEnd::exact ? exact : stopped);
    refused_loads += refused_load ? 1 : 0;
  }
  // Both outcomes must be seen in every block, or its seeds test less than they claim. (A
  // refused load is not seen in every block; AFailedLoadNamesTheFileAndTheCheckpointStillResumes
  // makes one.)
  EXPECT_GT(stopped, 0);
  EXPECT_GT(exact, 0);
  std::printf(
      "seeds %d-%d: %d stopped with a named error, %d ran to the fault-free result; %d faulty "
      "loads refused naming the file; every one resumed to the fault-free result\n",
      first, first + kSeedsPerBlock - 1, stopped, exact, refused_loads);
}

INSTANTIATE_TEST_SUITE_P(Blocks, CheckpointFaultSeeds,
                         ::testing::Range(0, kSeeds / kSeedsPerBlock));

// An offloaded step's sub-groups are stepped beside the next step's forward: a swap write failing
// there fails that next call, with the disk's error, its fix and where the run can be resumed
// from, and the run ends holding nothing. The fault is the last swap completion of step 1, counted
// in a clean run whose evaluation before step 2 waits for step 1's optimizer (this config moves
// nothing to or from swap in a forward).
TEST(CheckpointFaults, ASwapErrorOfTheOptimizerBesideTheNextForwardFailsThatCall) {
  if (test_world().world_size() > 1) GTEST_SKIP() << "faults are tested in a world of one";
  TempDirectory swap;
  nlohmann::json zero = {{"stage", 3}, {"reduce_bucket_size", 5000}, {"sub_group_size", 8192}};
  nlohmann::json config = with_zero(base_config(2), zero, "none", "nvme", swap.string());
  config["strata"]["overlap_optimizer"] = false;
  const TrainedRun clean = train(config, Ranks::local, 2, /*eval_every=*/1);
  ASSERT_EQ(clean.swap_completions.size(), 2u);
  ASSERT_GT(clean.steps[0].late_sub_groups, 0);
  const std::int64_t last_of_step_1 = clean.swap_completions[1] - 1;
  ASSERT_GT(last_of_step_1, clean.swap_completions[0]);

  CheckpointPlan plan;
  plan.faults.swap.fail(last_of_step_1, EIO);
  plan.stop_on_error = true;
  const TrainedRun faulty = train(config, Ranks::local, 3, 0, plan);
  ASSERT_EQ(faulty.steps.size(), 1u) << "step 1 returns; the next call meets its failure";
  EXPECT_THAT(faulty.error, HasSubstr(strerror(EIO)));
  EXPECT_THAT(faulty.error, HasSubstr("optimizer step 1 failed"));
  EXPECT_THAT(faulty.error_fix, HasSubstr("training cannot continue from this state"));
  EXPECT_THAT(faulty.error_fix, HasSubstr("restart the run"));
  EXPECT_EQ(faulty.device_bytes_left, 0);
  EXPECT_EQ(faulty.pinned_bytes_left, 0);
  EXPECT_TRUE(files_under(swap.path()).empty()) << "swap files left behind";
}

// A load whose reads fail or return damaged bytes stops with the file named; the same
// checkpoint then loads and resumes exactly.
TEST(CheckpointFaults, AFailedLoadNamesTheFileAndTheCheckpointStillResumes) {
  if (test_world().world_size() > 1) GTEST_SKIP() << "faults are tested in a world of one";
  TempDirectory swap;
  const nlohmann::json config = nvme_config(swap.string());
  const TrainedRun clean = train(config, Ranks::local, kSteps);
  TempDirectory saves;
  train(config, Ranks::local, kSaveEvery, 0, {saves.path(), kSaveEvery, {}});
  const struct {
    aio::FaultPlan plan;
    const char* expected;
  } cases[] = {
      {aio::FaultPlan(1).fail(0, EIO), "Input/output error"},
      {aio::FaultPlan(2).flip_bit(0), "the file is damaged"},
      {aio::FaultPlan(3).flip_bit(1), "the file is damaged"},
  };
  for (const auto& c : cases) {
    CheckpointPlan plan;
    plan.resume_from = saves.path();
    plan.faults.checkpoint = c.plan;
    plan.stop_on_error = true;
    const TrainedRun failed = train(config, Ranks::local, kSteps, 0, plan);
    EXPECT_THAT(failed.error,
                AllOf(HasSubstr(c.expected), HasSubstr(".safetensors"),
                      HasSubstr("loading " + (saves.path() / "global_step4").string())));
    EXPECT_TRUE(failed.losses.empty()) << "trained on a checkpoint that failed to load";
    EXPECT_EQ(failed.device_bytes_left, 0);
  }
  const TrainedRun resumed = train(config, Ranks::local, kSteps, 0, {{}, 0, saves.path()});
  expect_same_bits(resumed.losses, resumed.params, clean, kSaveEvery + 1);
}

// --- damaged and mismatched checkpoints -------------------------------------------------------

class CheckpointRefusal : public ::testing::Test {
 protected:
  void SetUp() override {
    if (test_world().world_size() > 1) GTEST_SKIP() << "refusals are tested in a world of one";
    config_ = nvme_config(swap_.string());
    train(config_, Ranks::local, 2, 0, {saves_.path(), 2, {}});
    checkpoint_ = saves_.path() / "global_step2";
  }

  // What loading the save directory into a run of `config` says.
  std::string refusal(const nlohmann::json& config) {
    CheckpointPlan plan;
    plan.resume_from = saves_.path();
    plan.stop_on_error = true;
    const TrainedRun run = train(config, Ranks::local, 4, 0, plan);
    EXPECT_TRUE(run.losses.empty()) << "trained on a refused checkpoint";
    EXPECT_FALSE(run.error.empty()) << "the checkpoint was not refused";
    fix_ = run.error_fix;
    return run.error;
  }
  std::string refusal() { return refusal(config_); }

  fs::path state_file() const { return checkpoint_ / "exp_avg.rank00000.safetensors"; }

  TempDirectory swap_;
  TempDirectory saves_;
  nlohmann::json config_;
  fs::path checkpoint_;
  std::string fix_;
};

TEST_F(CheckpointRefusal, AFlippedBitNamesTheFile) {
  std::fstream file(state_file(), std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(-5, std::ios::end);
  const char byte = static_cast<char>(file.get());
  file.seekp(-5, std::ios::end);
  file.put(static_cast<char>(byte ^ 0x10));
  file.close();
  EXPECT_THAT(refusal(), AllOf(HasSubstr(state_file().string()), HasSubstr("damaged")));
  EXPECT_THAT(fix_, HasSubstr("resume from another checkpoint"));
}

TEST_F(CheckpointRefusal, ATruncatedFileNamesTheFile) {
  fs::resize_file(state_file(), fs::file_size(state_file()) - 100);
  EXPECT_THAT(refusal(), AllOf(HasSubstr(state_file().string()), HasSubstr("truncated")));
}

TEST_F(CheckpointRefusal, AMissingFileNamesTheFile) {
  fs::remove(state_file());
  EXPECT_THAT(refusal(), AllOf(HasSubstr(state_file().string()), HasSubstr("missing")));
}

TEST_F(CheckpointRefusal, AMissingManifestSaysWhatToGive) {
  fs::remove(checkpoint_ / "manifest.json");
  EXPECT_THAT(refusal(),
              AllOf(HasSubstr("latest names global_step2"), HasSubstr("no manifest.json")));
}

TEST_F(CheckpointRefusal, ADamagedManifestNamesIt) {
  std::ofstream(checkpoint_ / "manifest.json") << "{\"format\": 1, \"tag\": ";
  EXPECT_THAT(refusal(), HasSubstr((checkpoint_ / "manifest.json").string()));
}

TEST_F(CheckpointRefusal, AnotherModelNamesTheTensorAndTheFix) {
  nlohmann::json other = config_;
  other["strata"]["model"]["d_model"] = 48;
  EXPECT_THAT(refusal(other), AllOf(HasSubstr("manifest.json"), HasSubstr("tensor"),
                                    HasSubstr("in the checkpoint but")));
  EXPECT_THAT(fix_, HasSubstr("strata ckpt inspect"));
  other = config_;
  other["strata"]["model"]["n_layer"] = 3;
  EXPECT_THAT(refusal(other),
              AllOf(HasSubstr("manifest.json"), HasSubstr("not in the checkpoint")));
}

// A vocabulary of 200 tokens pads wte to the 256 rows of the saved one's 256 tokens: the same
// shape, another model.
TEST_F(CheckpointRefusal, AnotherVocabularyInTheSamePaddedRowsNamesTheTokenRows) {
  nlohmann::json other = config_;
  other["strata"]["model"]["vocab"] = 200;
  EXPECT_THAT(refusal(other),
              AllOf(HasSubstr("manifest.json: tensor \"wte\" holds 256 tokens' rows in the "
                              "checkpoint but 200 in this model"),
                    HasSubstr("both padded to [256, ")));
  EXPECT_THAT(fix_, HasSubstr("strata ckpt inspect"));
}

TEST_F(CheckpointRefusal, AnotherOptimizerNamesBoth) {
  nlohmann::json other = config_;
  other["optimizer"]["type"] = "Adagrad";
  other["optimizer"]["params"].erase("betas");
  EXPECT_THAT(refusal(other), AllOf(HasSubstr("AdamW states"), HasSubstr("Adagrad")));
  EXPECT_THAT(fix_, HasSubstr("set optimizer.type to AdamW"));
}

TEST_F(CheckpointRefusal, ALatestThatNamesNothingIsRefused) {
  fs::remove_all(checkpoint_);
  EXPECT_THAT(refusal(),
              AllOf(HasSubstr("latest names global_step2"), HasSubstr("no manifest.json")));
}

}  // namespace
}  // namespace strata::engine::zero_testing

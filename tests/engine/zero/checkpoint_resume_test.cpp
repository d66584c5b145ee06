// Checkpoints through the real Engine (docs/checkpoints.md): a run saved after step 6 and
// resumed to step 12 is the uninterrupted 12-step run bit for bit (every loss and every final
// master parameter) at stage 0, stage 2 with CPU offload, stage 3 with parameters and optimizer
// on NVMe, with strata.overlap_optimizer, and with fp16 loss scaling; under mpirun the same on 2
// and 4 ranks. Resumed at another stage, offload or world size, its losses are those of the
// uninterrupted run within the ZeRO equivalence tolerance (zero_equivalence_test.cpp says why
// they are not the same bits: the sums run in another order).

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/checkpoint/manifest.h"
#include "tests/engine/zero/zero_test_util.h"

namespace strata::engine::zero_testing {
namespace {

constexpr int kSteps = 12;
constexpr int kSaveAt = 6;
constexpr std::int64_t kMicroBatch = 2;

nlohmann::json config_for(int stage, const std::string& param_device,
                          const std::string& optimizer_device, const std::string& nvme_path = "",
                          std::int64_t micro_batch = kMicroBatch) {
  const nlohmann::json zero = {{"stage", stage},
                               {"reduce_bucket_size", 5000},
                               {"sub_group_size", 8192},
                               {"stage3_param_persistence_threshold", 0}};
  return with_zero(base_config(micro_batch), zero, param_device, optimizer_device, nvme_path);
}

// Saved at step 6 (planned `plan_ahead` steps before: CheckpointPlan) and resumed: the second
// half of the uninterrupted run, to the bit. `saves_during_step`: how many of its saves the step
// made (TrainedRun::saves_during_step).
void resumes_exactly(const nlohmann::json& config, int plan_ahead, int& saves_during_step) {
  const TrainedRun whole = train(config, Ranks::world, kSteps);
  TempDirectory saves(/*shared=*/true);
  CheckpointPlan plan{saves.path(), kSaveAt, {}};
  plan.plan_ahead = plan_ahead;
  const TrainedRun first = train(config, Ranks::world, kSaveAt, 0, plan);
  saves_during_step = first.saves_during_step;
  const TrainedRun second = train(config, Ranks::world, kSteps, 0, {{}, 0, saves.path()});
  ASSERT_EQ(first.losses.size(), static_cast<std::size_t>(kSaveAt));
  ASSERT_EQ(second.losses.size(), static_cast<std::size_t>(kSteps - kSaveAt));
  for (int i = 0; i < kSaveAt; ++i)
    EXPECT_EQ(first.losses[i], whole.losses[i]) << "step " << i + 1;
  for (int i = kSaveAt; i < kSteps; ++i) {
    EXPECT_EQ(second.losses[i - kSaveAt], whole.losses[i]) << "step " << i + 1;
    EXPECT_EQ(second.steps[i - kSaveAt].grad_norm, whole.steps[i].grad_norm) << "step " << i + 1;
    EXPECT_EQ(second.steps[i - kSaveAt].step, whole.steps[i].step) << "step " << i + 1;
  }
  ASSERT_EQ(second.params.size(), whole.params.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < whole.params.size(); ++i)
    differing += second.params[i] != whole.params[i] ? 1 : 0;
  EXPECT_EQ(differing, 0u) << "final master parameters that differ from the uninterrupted run";
}

int expect_resumes_exactly(const nlohmann::json& config, int plan_ahead = 0) {
  int saves_during_step = -1;
  resumes_exactly(config, plan_ahead, saves_during_step);
  return saves_during_step;
}

// The checkpoint files of step kSaveAt, saved the usual way and planned (made by the step).
void expect_planned_save_is_the_same(const nlohmann::json& config) {
  TempDirectory usual(/*shared=*/true);
  TempDirectory planned(/*shared=*/true);
  train(config, Ranks::world, kSaveAt, 0, {usual.path(), kSaveAt, {}});
  CheckpointPlan plan{planned.path(), kSaveAt, {}};
  plan.plan_ahead = 1;
  const TrainedRun run = train(config, Ranks::world, kSaveAt, 0, plan);
  EXPECT_EQ(run.saves_during_step, 1);
  const std::string tag = "global_step" + std::to_string(kSaveAt);
  const checkpoint::Manifest a = checkpoint::read_manifest(usual.path() / tag);
  const checkpoint::Manifest b = checkpoint::read_manifest(planned.path() / tag);
  ASSERT_EQ(a.files.size(), b.files.size());
  for (std::size_t f = 0; f < a.files.size(); ++f) {
    EXPECT_EQ(a.files[f].name, b.files[f].name);
    EXPECT_EQ(a.files[f].bytes, b.files[f].bytes) << a.files[f].name;
    EXPECT_EQ(a.files[f].crc32c, b.files[f].crc32c) << a.files[f].name;
  }
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.batches, b.batches);
}

TEST(CheckpointResume, Stage0ResumesBitForBit) {
  expect_resumes_exactly(config_for(0, "none", "none"));
}

TEST(CheckpointResume, Stage2WithCpuOffloadResumesBitForBit) {
  expect_resumes_exactly(config_for(2, "none", "cpu"));
}

TEST(CheckpointResume, Stage3WithEverythingOnNvmeResumesBitForBit) {
  TempDirectory swap;
  expect_resumes_exactly(config_for(3, "nvme", "nvme", swap.string()));
  EXPECT_TRUE(files_under(swap.path()).empty()) << "swap files left behind";
}

// With the states on NVMe the step that a save follows writes them to the checkpoint as its
// optimizer steps them (Engine::plan_checkpoint): the files are the usual save's, byte for byte.
TEST(CheckpointResume, ASaveMadeDuringTheStepResumesBitForBit) {
  TempDirectory swap;
  const nlohmann::json config = config_for(3, "nvme", "nvme", swap.string());
  expect_planned_save_is_the_same(config);
  EXPECT_EQ(expect_resumes_exactly(config, 1), 1);
  EXPECT_TRUE(files_under(swap.path()).empty()) << "swap files left behind";
}

// Loaded with the states on NVMe, the masters are read for the parameters and the optimizer's
// states by the first step, where it would read them from swap: that step reads the swap for the
// parameters and gradients alone, and writes what a step writes. Asked for before any step (the
// masters of a run that trains no further), the states are read then.
TEST(CheckpointResume, ALoadOnNvmeLeavesTheOptimizerStatesToTheFirstStep) {
  TempDirectory swap;
  const nlohmann::json config = config_for(3, "nvme", "nvme", swap.string());
  const TrainedRun whole = train(config, Ranks::world, kSteps);
  TempDirectory saves(/*shared=*/true);
  const TrainedRun first = train(config, Ranks::world, kSaveAt, 0, {saves.path(), kSaveAt, {}});
  const TrainedRun second = train(config, Ranks::world, kSaveAt + 1, 0, {{}, 0, saves.path()});
  ASSERT_EQ(second.steps.size(), 1u);
  const StepStats& after_load = second.steps[0];
  const StepStats& usual = whole.steps[kSaveAt];
  EXPECT_EQ(after_load.loss, usual.loss);
  EXPECT_LT(after_load.bytes_nvme_read, usual.bytes_nvme_read);
  EXPECT_EQ(after_load.bytes_nvme_write, usual.bytes_nvme_write);
  const TrainedRun idle = train(config, Ranks::world, kSaveAt, 0, {{}, 0, saves.path()});
  EXPECT_TRUE(idle.losses.empty());
  EXPECT_TRUE(idle.params == first.params) << "masters read before any step";
}

// With pipelined reads and writes through two buffers, and through one, the same files.
TEST(CheckpointResume, ASaveMadeDuringAPipelinedStepWithTwoBuffersIsTheSame) {
  TempDirectory swap;
  nlohmann::json config = config_for(3, "nvme", "nvme", swap.string());
  nlohmann::json& offload = config["zero_optimization"]["offload_optimizer"];
  offload["pipeline_read"] = true;
  offload["pipeline_write"] = true;
  offload["buffer_count"] = 2;
  expect_planned_save_is_the_same(config);
  offload["buffer_count"] = 1;
  offload["pipeline_read"] = false;
  expect_planned_save_is_the_same(config);
}

// bf16 moments and masters reach the save widened to fp32, as the usual save writes them.
TEST(CheckpointResume, ASaveMadeDuringTheStepWidensBf16States) {
  TempDirectory swap;
  nlohmann::json config = config_for(3, "nvme", "nvme", swap.string());
  config["bf16"]["bf16_master_weights_and_grads"] = true;
  config["bf16"]["bf16_optimizer_states"] = true;
  expect_planned_save_is_the_same(config);
}

// Where the step cannot make the save (states in CPU memory; an optimizer overlapped with
// backward), or the plan went stale (a step went by without the save), the save is made the
// usual way and resumes just the same.
TEST(CheckpointResume, AnUnusablePlanSavesTheUsualWay) {
  EXPECT_EQ(expect_resumes_exactly(config_for(2, "none", "cpu"), 1), 0);
  TempDirectory swap;
  nlohmann::json overlapped = config_for(3, "none", "nvme", swap.string());
  overlapped["strata"]["overlap_optimizer"] = true;
  EXPECT_EQ(expect_resumes_exactly(overlapped, 1), 0);
  TempDirectory stale_swap;
  EXPECT_EQ(expect_resumes_exactly(config_for(3, "nvme", "nvme", stale_swap.string()), 2), 0);
}

TEST(CheckpointResume, OverlappedOptimizerResumesBitForBit) {
  nlohmann::json config = config_for(2, "none", "cpu");
  config["strata"]["overlap_optimizer"] = true;
  expect_resumes_exactly(config);
}

TEST(CheckpointResume, Fp16LossScalingResumesBitForBit) {
  nlohmann::json config = config_for(2, "none", "cpu");
  config.erase("bf16");
  // A small window, so that the scale changes (and its counters matter) within 12 steps, and the
  // save comes half way through one.
  config["fp16"] = {{"enabled", true}, {"initial_scale_power", 16}, {"loss_scale_window", 4}};
  expect_resumes_exactly(config);
}

// Saves every 4 steps with keep_last 2: the two newest tags stay, `latest` names the newest, and
// resuming from the older one by its tag gives the uninterrupted run's bits from there on.
TEST(CheckpointResume, KeepsTheNewestAndResumesFromAnOlderTag) {
  nlohmann::json config = config_for(2, "none", "cpu");
  config["strata"]["checkpoint"] = {{"keep_last", 2}};
  const TrainedRun whole = train(config, Ranks::world, 12);
  TempDirectory saves(/*shared=*/true);
  config["strata"]["checkpoint"]["dir"] = saves.string();
  CheckpointPlan plan;
  plan.save_dir = saves.path();
  plan.save_every = 4;
  train(config, Ranks::world, 12, 0, plan);
  std::vector<std::string> tags;
  for (const auto& entry : std::filesystem::directory_iterator(saves.path()))
    tags.push_back(entry.path().filename().string());
  std::sort(tags.begin(), tags.end());
  EXPECT_EQ(tags, (std::vector<std::string>{"global_step12", "global_step8", "latest"}));
  CheckpointPlan older;
  older.resume_from = saves.path();
  older.resume_tag = "global_step8";
  const TrainedRun resumed = train(config, Ranks::world, 12, 0, older);
  ASSERT_EQ(resumed.losses.size(), 4u);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(resumed.losses[static_cast<std::size_t>(i)],
              whole.losses[static_cast<std::size_t>(8 + i)]);
  EXPECT_TRUE(resumed.params == whole.params);
}

// Saved by every rank of the job at stage 3 with NVMe, resumed by one rank at stage 1 with the
// optimizer in CPU memory and the whole job's rows in its micro-batch.
TEST(CheckpointResume, ResumesAtAnotherStageOffloadAndWorldSize) {
  const int world = test_world().world_size();
  TempDirectory swap;
  const nlohmann::json saved_config = config_for(3, "nvme", "nvme", swap.string());
  const TrainedRun whole = train(saved_config, Ranks::world, kSteps);
  TempDirectory saves(/*shared=*/true);
  train(saved_config, Ranks::world, kSaveAt, 0, {saves.path(), kSaveAt, {}});
  const nlohmann::json resumed_config = config_for(1, "none", "cpu", "", kMicroBatch * world);
  const TrainedRun resumed = train(resumed_config, Ranks::local, kSteps, 0, {{}, 0, saves.path()});
  ASSERT_EQ(resumed.losses.size(), static_cast<std::size_t>(kSteps - kSaveAt));
  const double tolerance = world == 1 ? 1e-5 : 1e-4;
  for (int i = kSaveAt; i < kSteps; ++i) {
    EXPECT_NEAR(resumed.losses[i - kSaveAt], whole.losses[i], tolerance * whole.losses[i])
        << "step " << i + 1;
  }
  // And back the other way: saved by one rank at stage 0, resumed by every rank at stage 3.
  TempDirectory local_saves;
  const nlohmann::json local_config = config_for(0, "none", "none", "", kMicroBatch * world);
  const TrainedRun local_whole = train(local_config, Ranks::local, kSteps);
  train(local_config, Ranks::local, kSaveAt, 0, {local_saves.path(), kSaveAt, {}});
  const TrainedRun spread =
      train(config_for(3, "none", "cpu"), Ranks::world, kSteps, 0, {{}, 0, local_saves.path()});
  for (int i = kSaveAt; i < kSteps; ++i) {
    EXPECT_NEAR(spread.losses[i - kSaveAt], local_whole.losses[i],
                tolerance * local_whole.losses[i])
        << "step " << i + 1;
  }
}

}  // namespace
}  // namespace strata::engine::zero_testing

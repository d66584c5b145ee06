// ZeRO stages 1-3, with and without offload, learn what stage 0 on one rank learns (cases
// (a)-(e) below): the same tiny GPT, data and seed, 30 steps, bf16, AdamW, gradient clipping 1.0.
// The reference (a) is stage 0 with nothing offloaded on a world of one, run at world_size x the
// micro-batch, so that its one batch holds exactly the rows that the ranks' micro-batches hold
// together (zero_test_util.h says how the rows are cut).
//
// Tolerances: per step, |loss - reference| <= tolerance x |reference| (the gradient norm: 10 x
// tolerance, see expect_losses_near); final master parameters, |p - reference| <= tolerance x max
// |reference| (about 1, the layer-norm gains) for every element. Tolerance 1e-5 on one rank (the
// same kernels; only the gradient accumulation order may differ), 1e-4 across ranks (the reference
// sums a batch's gradients in one matmul, the ranks in world_size partial sums).
//
// The compute type: bf16 on one rank, fp32 across ranks. A last-bit difference in a gradient
// moves an fp32 master weight by a last bit, and now and then that flips a bf16 value the kernels
// see by a whole bf16 step (2^-8 relative). On one rank every run sums in the same order, so that
// never happens. Across ranks it does, and with bf16 activations each flip spreads through every
// activation it feeds: measured at 4 ranks, the runs drift to 1.3e-3 apart by step 30 and Adam
// moves weights whose gradients are mostly rounding noise to 8e-3 apart, so a tolerance loose
// enough for that would no longer tell a ZeRO error from noise. In fp32 the drift stays at fp32's
// scale: lr 1e-3 keeps the losses within 5e-6 and the final weights within 3e-5 x max |p| (2 and 4
// ranks), while the loss still falls from 5.53 to 4.11. Each comparison records its worst errors
// as test properties (--gtest_output=xml:FILE).

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "engine/zero/flat_layout.h"
#include "tests/engine/zero/zero_test_util.h"

namespace strata::engine::zero_testing {
namespace {

constexpr int kSteps = 30;
constexpr std::int64_t kMicroBatch = 2;
constexpr std::int64_t kSubGroupSize = 8192;

int world_size() {
  return test_world().world_size();
}

double tolerance() {
  return world_size() == 1 ? 1e-5 : 1e-4;
}

// The shared config in the compute type of this job's runs (above: bf16 on one rank, fp32 across
// ranks).
nlohmann::json job_config(std::int64_t micro_batch, std::int64_t accumulation = 1) {
  nlohmann::json config = base_config(micro_batch, accumulation);
  if (world_size() > 1) config["bf16"]["enabled"] = false;
  return config;
}

// (a): stage 0, nothing offloaded, one rank, with the rows of the whole job in each micro-batch.
nlohmann::json reference_config(std::int64_t accumulation = 1) {
  return job_config(kMicroBatch * world_size(), accumulation);
}

// The ZeRO settings of these runs: small buckets and sub-groups, so that a step has several of
// each, and no persistent parameters, so that every module is gathered and released.
nlohmann::json zero_section(int stage) {
  return {{"stage", stage},
          {"reduce_bucket_size", 5000},
          {"sub_group_size", kSubGroupSize},
          {"stage3_param_persistence_threshold", 0},
          {"stage3_prefetch_bucket_size", 20000},
          {"stage3_max_live_parameters", 100000},
          {"stage3_max_reuse_distance", 1000}};
}

nlohmann::json config_for(int stage, const std::string& param_device,
                          const std::string& optimizer_device, const std::string& nvme_path = "") {
  return with_zero(job_config(kMicroBatch), zero_section(stage), param_device, optimizer_device,
                   nvme_path);
}

void expect_matches(const TrainedRun& run, const nlohmann::json& expected_config) {
  const TrainedRun& expected = reference(expected_config, kSteps);
  expect_losses_near(run, expected, tolerance());
  expect_params_near(run, expected, tolerance());
}

// NVMe runs: every step reads the optimizer states and writes them back, and a clean exit leaves
// no swap file behind.
void expect_swapped_and_cleaned(const TrainedRun& run, const TempDirectory& swap) {
  for (std::size_t i = 0; i < run.steps.size(); ++i) {
    EXPECT_GT(run.steps[i].bytes_nvme_read, 0) << "step " << i + 1;
    EXPECT_GT(run.steps[i].bytes_nvme_write, 0) << "step " << i + 1;
  }
  for (const auto& file : files_under(swap.path()))
    ADD_FAILURE() << "swap file left after the engine was destroyed: " << file;
}

// The harness itself: stage 0 across the job's ranks (all-reduced gradients) against stage 0 on
// one rank at world_size x the micro-batch. If this fails, the row cut or the reference is wrong,
// not ZeRO.
TEST(ZeroEquivalence, Stage0AcrossRanksMatchesOneRankAtTheWholeBatch) {
  TrainedRun run = train(config_for(0, "none", "none"), Ranks::world, kSteps);
  expect_matches(run, reference_config());
  // The comparisons mean something only if the runs move: the loss must fall well below the
  // uniform ln(256) = 5.545 within the 30 steps (measured: 5.53 to 4.11).
  const TrainedRun& expected = reference(reference_config(), kSteps);
  EXPECT_LT(expected.losses.back(), expected.losses.front() - 1.0);
}

// (b) on one rank and (c) on four: stage 3 with parameters and optimizer states on NVMe, every
// parameter swapped (max_in_cpu 0).
TEST(ZeroEquivalence, Stage3ParamsAndOptimizerOnNvmeMatchStage0) {
  TempDirectory swap;
  TrainedRun run = train(config_for(3, "nvme", "nvme", swap.string()), Ranks::world, kSteps);
  expect_matches(run, reference_config());
  expect_swapped_and_cleaned(run, swap);
}

TEST(ZeroEquivalence, Stage3ParamsAndOptimizerOnCpuMatchStage0) {
  TrainedRun run = train(config_for(3, "cpu", "cpu"), Ranks::world, kSteps);
  expect_matches(run, reference_config());
}

// The NVMe tier's knobs move bytes, not results: with max_in_cpu large enough for every shard,
// parameters stay in CPU RAM and only the optimizer states travel to and from NVMe; without
// pipelining, or with the fewest buffers, the same values are read and written in another order.
// The same kernels run on the same values, so the results are the same bits. A different
// sub_group_size tiles the optimizer (and the norm's partial sums) differently: within tolerance.
TEST(ZeroEquivalence, Stage3NvmeKnobsChangeTrafficNotResults) {
  constexpr int steps = 6;
  TempDirectory swap;
  const nlohmann::json base = config_for(3, "nvme", "nvme", swap.string());
  const TrainedRun swapped = train(base, Ranks::world, steps);

  nlohmann::json in_cpu = base;
  in_cpu["zero_optimization"]["offload_param"]["max_in_cpu"] = 1'000'000'000;
  const TrainedRun cached = train(in_cpu, Ranks::world, steps);
  EXPECT_EQ(cached.losses, swapped.losses);
  EXPECT_EQ(cached.params, swapped.params);
  // Each step's bytes are the same in every run (engine/step_traffic.h), so they compare step
  // by step.
  for (int i = 0; i < steps; ++i) {
    const auto at = static_cast<std::size_t>(i);
    EXPECT_LT(cached.steps[at].bytes_nvme_read, swapped.steps[at].bytes_nvme_read)
        << "step " << i + 1 << ": max_in_cpu 1e9 should keep the parameters off NVMe";
  }

  nlohmann::json serial = base;
  serial["zero_optimization"]["offload_optimizer"]["pipeline_read"] = false;
  serial["zero_optimization"]["offload_optimizer"]["pipeline_write"] = false;
  serial["zero_optimization"]["offload_param"]["buffer_count"] = 2;
  const TrainedRun unpipelined = train(serial, Ranks::world, steps);
  EXPECT_EQ(unpipelined.losses, swapped.losses);
  EXPECT_EQ(unpipelined.params, swapped.params);

  nlohmann::json one_group = base;
  one_group["zero_optimization"]["sub_group_size"] = 1'000'000'000;
  const TrainedRun whole = train(one_group, Ranks::world, steps);
  expect_losses_near(whole, swapped, tolerance());
  expect_params_near(whole, swapped, tolerance());

  // DeepSpeed's sub_group_size 0 (widely copied stage-3 configs carry it): one sub-group per
  // module shard, swapped like any other cut.
  nlohmann::json per_module = base;
  per_module["zero_optimization"]["sub_group_size"] = 0;
  const TrainedRun modules = train(per_module, Ranks::world, steps);
  expect_losses_near(modules, swapped, tolerance());
  expect_params_near(modules, swapped, tolerance());
  EXPECT_GT(modules.steps.back().bytes_nvme_read, 0);
}

// The config a DeepSpeed user writes: stage3_* keys, buffers and bucket sizes at their defaults
// (so every module of this small model is persistent: under stage3_param_persistence_threshold),
// and one nvme_path for every rank, in which each rank keeps its own directory.
TEST(ZeroEquivalence, Stage3OnNvmeWithDefaultsAndOneNvmePathForAllRanksMatchesStage0) {
  TempDirectory swap(/*shared=*/true);
  nlohmann::json config = job_config(kMicroBatch);
  nlohmann::json offload = {
      {"device", "nvme"}, {"nvme_path", swap.string()}, {"pin_memory", false}};
  config["zero_optimization"] = {
      {"stage", 3}, {"offload_param", offload}, {"offload_optimizer", offload}};
  config["strata"]["job_name"] = job_name_for_test();
  TrainedRun run = train(config, Ranks::world, kSteps);
  expect_matches(run, reference_config());
  test_world().barrier();  // every rank's engine is gone, not only this one's
  for (const auto& file : files_under(swap.path()))
    ADD_FAILURE() << "swap file left after the engine was destroyed: " << file;
}

// (d): stages 1 and 2 with the optimizer on CPU, at every world size the suite runs.
TEST(ZeroEquivalence, Stage1And2WithOptimizerOnCpuMatchStage0) {
  for (int stage : {1, 2}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    TrainedRun run = train(config_for(stage, "none", "cpu"), Ranks::world, kSteps);
    expect_matches(run, reference_config());
  }
}

TEST(ZeroEquivalence, Stages1To3WithNothingOffloadedMatchStage0) {
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    TrainedRun run = train(config_for(stage, "none", "none"), Ranks::world, kSteps);
    expect_matches(run, reference_config());
  }
}

// Two micro-batches of 2 rows per rank at stage 3 against stage 0 with two micro-batches of
// 2 x world_size rows (the same rows in each): gradients reduce-scattered per micro-batch and
// accumulated in fp32 give the step that stage 0's accumulation gives. Both compute in fp32 at
// every world size: stage 0 adds the second micro-batch's gradients inside its products, stage 3
// in the partition, so even on one rank the sums run in another order, and in bf16 compute a
// flipped rounding spreads (see the top of this file; measured: 8e-5 apart by step 28).
TEST(ZeroEquivalence, Stage3AccumulatingTwoMicroBatchesMatchesStage0) {
  auto fp32 = [](nlohmann::json config) {
    config["bf16"]["enabled"] = false;
    return config;
  };
  nlohmann::json config = fp32(config_for(3, "none", "cpu"));
  config["gradient_accumulation_steps"] = 2;
  TrainedRun run = train(config, Ranks::world, kSteps);
  expect_matches(run, fp32(reference_config(2)));
}

// One gradient norm (the test below): runs of its wider model in each placement.
constexpr int kNormSteps = 20;

struct Placement {
  int stage;
  const char* params;
  const char* optimizer;
};

nlohmann::json placement_config(const nlohmann::json& base, int stage, const char* params,
                                const char* optimizer, const TempDirectory& swap) {
  nlohmann::json config = with_zero(base, zero_section(stage), params, optimizer, swap.string());
  // Its widest module's shard in one buffer.
  if (params == std::string("nvme"))
    config["zero_optimization"]["offload_param"]["buffer_size"] = 1 << 19;
  return config;
}

void expect_same_bits(const TrainedRun& run, const TrainedRun& expected, const std::string& where) {
  ASSERT_EQ(run.steps.size(), expected.steps.size()) << where;
  for (std::size_t s = 0; s < run.steps.size(); ++s) {
    EXPECT_EQ(std::bit_cast<std::uint64_t>(run.steps[s].grad_norm),
              std::bit_cast<std::uint64_t>(expected.steps[s].grad_norm))
        << where << ", step " << s + 1 << ": " << run.steps[s].grad_norm << " against "
        << expected.steps[s].grad_norm;
    EXPECT_EQ(std::bit_cast<std::uint64_t>(run.losses[s]),
              std::bit_cast<std::uint64_t>(expected.losses[s]))
        << where << ", step " << s + 1;
  }
  EXPECT_TRUE(run.params == expected.params) << where << ": the masters differ";
}

// One gradient norm: on one rank every placement sums the squares as one fp64 sum per module
// (scan_gradients' sum of the module's final shard, wherever it was summed), added last module
// first. Clipping at 1.0 clips this model's first steps, so a norm that differed in its last bit
// would part the runs; instead every placement trains to the same bits. The model is wider than
// the harness's so that its modules span several scan tiles; accumulating two micro-batches has
// the offloaded gradients summed and scanned on the CPU.
TEST(ZeroEquivalence, OnOneRankEveryPlacementTrainsToTheSameBitsWithClipping) {
  if (world_size() != 1) GTEST_SKIP() << "one gradient norm is a one-rank property";
  TinyModel model;
  model.n_layer = 1;
  model.d_model = 160;
  TempDirectory swap;
  for (const std::int64_t accumulation : {1, 2}) {
    const nlohmann::json base = base_config(kMicroBatch, accumulation, model);
    const TrainedRun& stage0 =
        reference(with_zero(base, zero_section(0), "none", "none", ""), kNormSteps);
    int clipped = 0;
    for (const StepStats& step : stage0.steps)
      clipped += step.grad_norm > 1.0 ? 1 : 0;
    EXPECT_GT(clipped, 0) << "the test means something only if clipping changes steps";
    // Stages 0-1 accumulate micro-batches in the module's gradient buffer, inside its backward's
    // products; stages 2-3 add each micro-batch's reduced gradients to the partition. With one
    // micro-batch a step the two are the same; with two they round differently, so stages 2-3
    // are held to stage 2 on the device.
    const TrainedRun& stage2 =
        accumulation == 1
            ? stage0
            : reference(with_zero(base, zero_section(2), "none", "none", ""), kNormSteps);
    expect_same_bits(
        train(placement_config(base, 1, "none", "none", swap), Ranks::local, kNormSteps), stage0,
        fmt::format("stage 1, accumulation {}", accumulation));
    for (const Placement& placement : {Placement{3, "none", "none"}, Placement{2, "none", "cpu"},
                                       Placement{3, "cpu", "cpu"}, Placement{3, "nvme", "nvme"}}) {
      const TrainedRun run = train(
          placement_config(base, placement.stage, placement.params, placement.optimizer, swap),
          Ranks::local, kNormSteps);
      expect_same_bits(
          run, stage2,
          fmt::format("stage {}, params {}, optimizer {}, accumulation {}", placement.stage,
                      placement.params, placement.optimizer, accumulation));
    }
  }
}

// fp16 with dynamic loss scaling (2^16 to start) at stage 3: gradients are unscaled and
// overflow-checked on every rank's shard, and the skip decision and the loss scale follow stage
// 0's. (On the host device the gradients are fp32, so no scale up to 2^126 overflows them here:
// this checks the scaled path's equivalence, not the skip itself, which grad_clip_test and
// loss_scaler_test cover.)
TEST(ZeroEquivalence, Stage3Fp16WithLossScalingMatchesStage0) {
  auto fp16 = [](nlohmann::json config) {
    config.erase("bf16");
    config["fp16"] = {{"enabled", true}, {"initial_scale_power", 16}};
    return config;
  };
  TrainedRun run = train(fp16(config_for(3, "none", "cpu")), Ranks::world, kSteps);
  const TrainedRun& expected = reference(fp16(reference_config()), kSteps);
  ASSERT_EQ(run.steps.size(), expected.steps.size());
  for (std::size_t i = 0; i < run.steps.size(); ++i) {
    EXPECT_EQ(run.steps[i].skipped, expected.steps[i].skipped) << "step " << i + 1;
    EXPECT_EQ(run.steps[i].loss_scale, expected.steps[i].loss_scale) << "step " << i + 1;
  }
  expect_losses_near(run, expected, tolerance());
  // The kernels compute in fp16 here on every world size, so across ranks a parameter whose
  // gradient is mostly rounding noise takes Adam steps of its own (measured: up to 3.4e-3 x max
  // |p| apart at 2 ranks, while every loss stays within 1e-4); the losses hold the run to stage 0.
  expect_params_near(run, expected, world_size() == 1 ? tolerance() : 5e-3);
}

// evaluate() runs the modules forward only, an order that differs from the trace the coordinator
// recorded on the first training step; the next step must re-record and train on, and
// evaluation must change nothing: the training losses match a reference that never evaluates,
// and the evaluated losses match stage 0's on the same ranks and batches.
TEST(ZeroEquivalence, Stage3EvaluateBetweenStepsChangesNothing) {
  TempDirectory swap;
  TrainedRun run =
      train(config_for(3, "nvme", "nvme", swap.string()), Ranks::world, kSteps, /*eval_every=*/4);
  expect_matches(run, reference_config());
  TrainedRun stage0 = train(config_for(0, "none", "none"), Ranks::world, kSteps, 4);
  ASSERT_EQ(run.eval_losses.size(), stage0.eval_losses.size());
  for (std::size_t i = 0; i < run.eval_losses.size(); ++i) {
    EXPECT_NEAR(run.eval_losses[i], stage0.eval_losses[i],
                tolerance() * std::abs(stage0.eval_losses[i]))
        << "evaluation " << i + 1;
  }
}

// (e): the optimizer step overlapped with backward gives the same losses and weights as the step
// after backward, bit for bit: each sub-group is stepped once from the same values with the same
// hyperparameters, whether early (the guess held), or early, undone and redone (it did not).

// Bit for bit, so that NaN equals NaN.
template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Clipping at 2.0 clips this model's first four steps (norms 3.2, 2.8, 2.6, 2.2, then 1.5-2.0).
constexpr double kOverlapClip = 2.0;

// The overlapped run beside the plain one, equal bitwise; returns the overlapped run.
TrainedRun expect_overlap_changes_nothing(nlohmann::json config, int steps = kSteps) {
  // Said, since a step the gradients cannot change overlaps by default.
  config["strata"]["overlap_optimizer"] = false;
  TrainedRun plain = train(config, Ranks::world, steps);
  config["strata"]["overlap_optimizer"] = true;
  TrainedRun overlapped = train(config, Ranks::world, steps);
  EXPECT_TRUE(same_bits(overlapped.losses, plain.losses));
  EXPECT_TRUE(same_bits(overlapped.params, plain.params));
  EXPECT_EQ(overlapped.steps.size(), plain.steps.size());
  for (std::size_t i = 0; i < plain.steps.size() && i < overlapped.steps.size(); ++i) {
    EXPECT_TRUE(same_bits(std::vector{overlapped.steps[i].grad_norm},
                          std::vector{plain.steps[i].grad_norm}))
        << "step " << i + 1;
    EXPECT_EQ(overlapped.steps[i].skipped, plain.steps[i].skipped) << "step " << i + 1;
    EXPECT_EQ(plain.steps[i].early_sub_groups, 0) << "step " << i + 1;
    // The plain step runs beside the next forward all the same.
    if (!plain.steps[i].skipped) {
      EXPECT_GT(plain.steps[i].late_sub_groups, 0) << "step " << i + 1;
    }
  }
  return overlapped;
}

// How many steps were stepped early and kept, and how many were undone.
struct OverlapCounts {
  int kept = 0;
  int undone = 0;
};

// `window`: the rollback window, which the thread steps whole; none (a step the gradients cannot
// change): the thread steps what it reaches before backward ends.
OverlapCounts overlap_counts(const TrainedRun& run, std::optional<std::int64_t> window) {
  std::int64_t partition = 0;
  for (std::int64_t padded : run.padded_numel)
    partition += padded / run.world_size;
  const auto sub_groups =
      static_cast<std::int64_t>(zero::make_sub_groups(partition, kSubGroupSize).size());
  OverlapCounts counts;
  for (const StepStats& step : run.steps) {
    // The window's sub-groups are all stepped early: every one becomes final before finish().
    if (window) {
      EXPECT_EQ(step.early_sub_groups, std::min(*window, sub_groups)) << "step " << step.step;
    }
    // The rest are left stepping beside the next forward.
    if (!step.skipped) {
      EXPECT_EQ(step.early_sub_groups + step.late_sub_groups, sub_groups) << "step " << step.step;
    }
    if (step.undone_sub_groups > 0) {
      EXPECT_EQ(step.undone_sub_groups, step.early_sub_groups);
      ++counts.undone;
    } else {
      ++counts.kept;
    }
  }
  return counts;
}

// The clipped steps undo and redo their early sub-groups; the others keep them.
TEST(ZeroEquivalence, OverlapOptimizerGivesTheSameLossesAsWithout) {
  nlohmann::json config = config_for(3, "none", "cpu");
  config["gradient_clipping"] = kOverlapClip;
  const TrainedRun run = expect_overlap_changes_nothing(config);
  const OverlapCounts counts = overlap_counts(run, /*window: buffer_count*/ 4);
  EXPECT_GT(counts.undone, 0);
  EXPECT_GT(counts.kept, 0);
}

// States on NVMe (an undo writes the prior value back to the swap file), two micro-batches (only
// the last one's backward finishes gradients), a rollback window of one swap buffer.
TEST(ZeroEquivalence, OverlapOptimizerOnNvmeWithAccumulationMatches) {
  TempDirectory swap;
  nlohmann::json config = config_for(3, "nvme", "nvme", swap.string());
  config["gradient_accumulation_steps"] = 2;
  config["gradient_clipping"] = kOverlapClip;
  config["zero_optimization"]["offload_optimizer"]["buffer_count"] = 2;
  const TrainedRun run = expect_overlap_changes_nothing(config);
  const OverlapCounts counts = overlap_counts(run, 2);
  EXPECT_GT(counts.undone, 0);
  EXPECT_GT(counts.kept, 0);
}

// Stage 1 on two ranks' worth of all-reduce, no clipping: the guess holds on every step.
TEST(ZeroEquivalence, OverlapOptimizerAtStage1WithoutClippingKeepsEveryEarlyStep) {
  nlohmann::json config = config_for(1, "none", "cpu");
  config["gradient_clipping"] = 0.0;
  const TrainedRun run = expect_overlap_changes_nothing(config);
  const OverlapCounts counts = overlap_counts(run, 4);
  EXPECT_EQ(counts.undone, 0);
}

// No clipping and no overflow check: the step is known before backward, so every sub-group is
// stepped as soon as it is final and nothing is kept; each one's new parameters go to the
// parameter tier from the thread while the engine's thread fetches the earlier modules' shards,
// and those not reached by the end of backward are stepped beside the next forward, which
// gathers each module once its sub-groups are committed: with the device tier (offload_param
// none) and with NVMe and two micro-batches.
TEST(ZeroEquivalence, OverlapOptimizerWithAFixedStepStepsEverySubGroupBesideTheDevice) {
  TempDirectory swap;
  for (const char* params : {"none", "nvme"}) {
    SCOPED_TRACE(params);
    nlohmann::json config = config_for(3, params, "nvme", swap.string());
    config["gradient_clipping"] = 0.0;
    config["bf16"]["check_grad_overflow"] = false;
    if (std::string(params) == "nvme") config["gradient_accumulation_steps"] = 2;
    const TrainedRun run = expect_overlap_changes_nothing(config);
    const OverlapCounts counts = overlap_counts(run, std::nullopt);
    EXPECT_EQ(counts.undone, 0);
  }
}

// An offloaded step leaves its sub-groups stepping beside the next forward, which gathers each
// module once its sub-groups are committed; an evaluation before every step settles them before
// that forward instead. Both give the same bits, with the parameters on the device, in CPU memory
// (gathered ahead) and on NVMe, the step overlapped or not. The bits are compared, not a
// tolerance: a few steps show them.
TEST(ZeroEquivalence, AStepFinishingBesideTheNextForwardIsTheStepFinishedBeforeIt) {
  constexpr int steps = 8;
  TempDirectory swap;
  for (const char* params : {"none", "cpu", "nvme"}) {
    for (const bool overlap : {false, true}) {
      SCOPED_TRACE(fmt::format("{}{}", params, overlap ? ", overlapped" : ""));
      nlohmann::json config = config_for(3, params, "cpu", swap.string());
      config["strata"]["overlap_optimizer"] = overlap;
      const TrainedRun beside = train(config, Ranks::world, steps);
      const TrainedRun settled = train(config, Ranks::world, steps, /*eval_every=*/1);
      EXPECT_TRUE(same_bits(beside.losses, settled.losses));
      EXPECT_TRUE(same_bits(beside.params, settled.params));
      // A plain step leaves all of its sub-groups to the next forward (an overlapped one those
      // beyond its rollback window, which at 2 or more ranks may be none).
      for (const StepStats& step : beside.steps) {
        if (!overlap && !step.skipped) {
          EXPECT_GT(step.late_sub_groups, 0) << "step " << step.step;
        }
      }
    }
  }
}

// fp16 with a learning rate so large that the first step pushes weights past fp16's range: the
// 16-bit copies turn inf, every later step's gradients are NaN and the step is skipped (the loss
// scale halving each time, from 2^16: 10 steps stay above fp16.min_loss_scale). A skipped step
// puts the early sub-groups back and steps nothing.
TEST(ZeroEquivalence, OverlapOptimizerUndoesSkippedFp16Steps) {
  nlohmann::json config = config_for(2, "none", "cpu");
  config.erase("bf16");
  config["fp16"] = {{"enabled", true}};
  config["optimizer"]["params"]["lr"] = 1e6;
  const TrainedRun run = expect_overlap_changes_nothing(config, 10);
  int skipped = 0;
  for (const StepStats& step : run.steps) {
    if (!step.skipped) continue;
    ++skipped;
    EXPECT_EQ(step.undone_sub_groups, step.early_sub_groups);
  }
  EXPECT_GT(skipped, 0);
}

}  // namespace
}  // namespace strata::engine::zero_testing

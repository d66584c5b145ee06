// Stage 3's collectives against the theory, from the Comm's counters (the bytes all-gathered per
// step at stage 3 are what the partitioning implies), the bytes each step reports the same in
// every run of a job, stage 3 with everything on NVMe under a device budget smaller than the
// model states, and the compute stream free of host functions.

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <numeric>
#include <string>

#include "tests/engine/zero/zero_test_util.h"

namespace strata::engine::zero_testing {
namespace {

constexpr std::int64_t kBf16Bytes = 2;
constexpr std::int64_t kFp32Bytes = 4;

// With no persistent parameters (stage3_param_persistence_threshold 0) and no reuse across
// modules (stage3_max_reuse_distance 0), every use of a module's parameters is a gather of its
// whole padded flat buffer in bf16, in forward and again in backward. A module is used by its
// own forward and backward and by those of every module that borrows it (the GPT's tied LM head
// reads the embedding's wte), so per step, per rank:
//
//   all_gather bytes_received = 2 x accumulation x sum_m padded_numel(m) x (1 + borrowers(m)) x 2
//   reduce_scatter bytes_sent = accumulation x sum_m padded_numel(m) x 4
//
// (each module's fp32 gradient, borrowed contributions included, is reduce-scattered once per
// micro-batch, whatever the bucket size). Persistent modules would leave the gather term; a reuse
// distance above 0 would drop the second gather of the modules used back to back at the turn
// from forward to backward. Small collectives (the gradient norm, the loss) are all-reduces and do
// not count here.
TEST(ZeroTraffic, Stage3GathersParametersTwiceAndReduceScattersGradientsOncePerMicroBatch) {
  if (test_world().world_size() == 1) GTEST_SKIP() << "a world of one has nothing to gather";
  constexpr std::int64_t accumulation = 2;
  nlohmann::json config = base_config(2, accumulation);
  config["zero_optimization"] = {{"stage", 3},
                                 {"reduce_bucket_size", 5000},
                                 {"stage3_param_persistence_threshold", 0},
                                 {"stage3_max_reuse_distance", 0}};
  const TrainedRun run = train(config, Ranks::world, 3);
  std::int64_t gathered_numel = 0;
  std::int64_t reduced_numel = 0;
  for (std::size_t m = 0; m < run.padded_numel.size(); ++m) {
    gathered_numel += run.padded_numel[m] * (1 + run.borrowers[m]);
    reduced_numel += run.padded_numel[m];
  }
  const std::int64_t gathered_bytes = 2 * accumulation * gathered_numel * kBf16Bytes;
  const std::int64_t reduced_bytes = accumulation * reduced_numel * kFp32Bytes;
  for (std::size_t i = 0; i < run.traffic.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1) + " of " + std::to_string(run.world_size) +
                 " ranks");
    const gpu::CollectiveTraffic& gather = run.traffic[i][gpu::CollectiveKind::all_gather];
    const gpu::CollectiveTraffic& scatter = run.traffic[i][gpu::CollectiveKind::reduce_scatter];
    EXPECT_EQ(gather.bytes_received, gathered_bytes);
    EXPECT_EQ(gather.bytes_sent, gathered_bytes / run.world_size);
    EXPECT_EQ(scatter.bytes_sent, reduced_bytes);
    EXPECT_EQ(scatter.bytes_received, reduced_bytes / run.world_size);
  }
}

// Modules that stay gathered are gathered once per step, not per use: persistent ones (the
// default stage3_param_persistence_threshold, 1e5 elements, covers every module of this model)
// and, from the second step on (once the trace is known), ones reused within
// stage3_max_reuse_distance (default 1e9 elements: all of them). The one gather per module and
// step brings the weights the optimizer has just updated; gradients are reduce-scattered per
// micro-batch as before:
//
//   all_gather bytes_received = sum_m padded_numel(m) x 2
//   reduce_scatter bytes_sent = accumulation x sum_m padded_numel(m) x 4
TEST(ZeroTraffic, Stage3PersistentOrReusedParametersAreGatheredOncePerStep) {
  if (test_world().world_size() == 1) GTEST_SKIP() << "a world of one has nothing to gather";
  constexpr std::int64_t accumulation = 2;
  for (const bool persistent : {true, false}) {
    SCOPED_TRACE(persistent ? "persistent (defaults)" : "reused (persistence threshold 0)");
    nlohmann::json config = base_config(2, accumulation);
    config["zero_optimization"] = {{"stage", 3}};
    if (!persistent) config["zero_optimization"]["stage3_param_persistence_threshold"] = 0;
    const TrainedRun run = train(config, Ranks::world, 3);
    const std::int64_t numel =
        std::accumulate(run.padded_numel.begin(), run.padded_numel.end(), std::int64_t{0});
    for (std::size_t i = persistent ? 0 : 1; i < run.traffic.size(); ++i) {
      SCOPED_TRACE("step " + std::to_string(i + 1));
      EXPECT_EQ(run.traffic[i][gpu::CollectiveKind::all_gather].bytes_received, numel * kBf16Bytes);
      EXPECT_EQ(run.traffic[i][gpu::CollectiveKind::reduce_scatter].bytes_sent,
                accumulation * numel * kFp32Bytes);
    }
  }
}

// Stages 1 and 2 keep whole bf16 weights on every rank and shard the optimizer: after the step,
// each rank's updated shard is all-gathered once. Stage 1 all-reduces the gradients once per
// step, after accumulating the micro-batches locally; stage 2 partitions the gradients too, so it
// reduce-scatters every micro-batch's (DeepSpeed's stage-2 semantics). Per step, per rank:
//
//   all_gather bytes_received  = sum_m padded_numel(m) x 2 (both stages)
//   stage 1: all_reduce bytes  = sum_m padded_numel(m) x 4, plus the loss and the norm (< 1 KiB)
//   stage 2: reduce_scatter bytes_sent = accumulation x sum_m padded_numel(m) x 4
TEST(ZeroTraffic, Stages1And2ReduceGradientsAndGatherTheUpdatedWeights) {
  if (test_world().world_size() == 1) GTEST_SKIP() << "a world of one has nothing to gather";
  constexpr std::int64_t accumulation = 2;
  constexpr std::int64_t small_bytes = 1024;
  for (const int stage : {1, 2}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    nlohmann::json config = base_config(2, accumulation);
    config["zero_optimization"] = {{"stage", stage}, {"reduce_bucket_size", 5000}};
    const TrainedRun run = train(config, Ranks::world, 3);
    const std::int64_t numel =
        std::accumulate(run.padded_numel.begin(), run.padded_numel.end(), std::int64_t{0});
    const std::int64_t reduced = stage == 1 ? numel * kFp32Bytes : 0;
    const std::int64_t scattered = stage == 2 ? accumulation * numel * kFp32Bytes : 0;
    for (std::size_t i = 0; i < run.traffic.size(); ++i) {
      SCOPED_TRACE("step " + std::to_string(i + 1));
      const gpu::CommCounters& traffic = run.traffic[i];
      EXPECT_EQ(traffic[gpu::CollectiveKind::all_gather].bytes_received, numel * kBf16Bytes);
      EXPECT_EQ(traffic[gpu::CollectiveKind::reduce_scatter].bytes_sent, scattered);
      EXPECT_GE(traffic[gpu::CollectiveKind::all_reduce].bytes_sent, reduced);
      EXPECT_LT(traffic[gpu::CollectiveKind::all_reduce].bytes_sent, reduced + small_bytes);
    }
  }
}

// What a step reports moving (StepStats: the device's copies and the NVMe bytes) follows from the
// job alone, not from how far the optimizer's threads got beside backward and beside the next
// forward (engine/step_traffic.h): two runs of one job count the same bytes in every step, with
// every placement whose optimizer runs on threads of its own, and with an evaluation before
// steps 1 and 4 that settles the optimizer early.
TEST(ZeroTraffic, TwoRunsOfOneJobCountTheSameBytesInEveryStep) {
  struct Placement {
    const char* params;
    const char* optimizer;
    bool overlap;
    bool fixed_step;  // no clipping, no overflow check: the thread stops where backward ends
    int accumulation;
  };
  const Placement placements[] = {{"nvme", "nvme", false, false, 1},
                                  {"nvme", "nvme", true, true, 2},
                                  {"nvme", "nvme", true, false, 1},
                                  {"none", "cpu", true, true, 1},
                                  {"cpu", "nvme", false, false, 2}};
  for (const Placement& placement : placements) {
    SCOPED_TRACE(
        fmt::format("parameters on {}, optimizer on {}{}{}, {} micro-batches", placement.params,
                    placement.optimizer, placement.overlap ? ", overlapped" : "",
                    placement.fixed_step ? " with a fixed step" : "", placement.accumulation));
    TempDirectory swap;
    const nlohmann::json zero = {{"stage", 3},
                                 {"reduce_bucket_size", 5000},
                                 {"sub_group_size", 4096},
                                 {"stage3_param_persistence_threshold", 0},
                                 {"stage3_prefetch_bucket_size", 20000},
                                 {"stage3_max_live_parameters", 100000}};
    nlohmann::json config = with_zero(base_config(2, placement.accumulation), zero,
                                      placement.params, placement.optimizer, swap.string());
    config["strata"]["overlap_optimizer"] = placement.overlap;
    if (placement.fixed_step) {
      config["gradient_clipping"] = 0.0;
      config["bf16"]["check_grad_overflow"] = false;
    }
    constexpr int steps = 5;
    const TrainedRun first = train(config, Ranks::world, steps, /*eval_every=*/3);
    const TrainedRun second = train(config, Ranks::world, steps, 3);
    ASSERT_EQ(first.steps.size(), second.steps.size());
    for (std::size_t i = 0; i < first.steps.size(); ++i) {
      SCOPED_TRACE("step " + std::to_string(i + 1));
      const StepStats& a = first.steps[i];
      const StepStats& b = second.steps[i];
      EXPECT_GT(a.transfers.bytes_h2d, 0);
      EXPECT_EQ(a.transfers.bytes_h2d, b.transfers.bytes_h2d);
      EXPECT_EQ(a.transfers.bytes_d2h, b.transfers.bytes_d2h);
      EXPECT_EQ(a.transfers.bytes_d2d, b.transfers.bytes_d2d);
      EXPECT_EQ(a.transfers.bytes_h2h, b.transfers.bytes_h2h);
      EXPECT_EQ(a.bytes_nvme_read, b.bytes_nvme_read);
      EXPECT_EQ(a.bytes_nvme_write, b.bytes_nvme_write);
      if (std::string(placement.optimizer) == "nvme") {
        EXPECT_GT(a.bytes_nvme_write, 0);
      }
    }
  }
}

// Stage 3 with parameters and optimizer states on NVMe trains a model whose states (fp32 master,
// fp32 gradient, Adam's two moments: 16 bytes a parameter) are twice the device budget, and the
// device never holds more than the budget.
TEST(ZeroBudget, Stage3OnNvmeTrainsUnderADeviceBudgetBelowTheModelStates) {
  const TinyModel model{.n_layer = 4, .n_head = 4, .d_model = 128, .seq_len = 16, .vocab = 256};
  // 4 x (12 x 128^2 + 13 x 128) + 256 x 128 + 16 x 128 + 2 x 128 = 828,160 parameters.
  const std::int64_t parameters = parameter_count(model);
  ASSERT_EQ(parameters, 828'160);
  const std::int64_t states_bytes = 16 * parameters;
  const std::int64_t budget = states_bytes / 2;
  TempDirectory swap;
  nlohmann::json config = base_config(1, 1, model);
  config["zero_optimization"] = {
      {"stage", 3},
      {"reduce_bucket_size", 50000},
      {"sub_group_size", 100000},
      {"stage3_param_persistence_threshold", 0},
      {"stage3_prefetch_bucket_size", 200000},
      {"stage3_max_live_parameters", 400000},
      {"offload_param", offload_section("nvme", swap.string(), true)},
      {"offload_optimizer", offload_section("nvme", swap.string(), false)}};
  config["zero_optimization"]["offload_param"]["buffer_size"] = 1 << 18;
  config["strata"]["device_memory_budget"] = budget;
  config["strata"]["job_name"] = job_name_for_test();
  const TrainedRun run = train(config, Ranks::world, 6);
  EXPECT_EQ(run.parameter_count, parameters);
  for (std::size_t i = 0; i < run.steps.size(); ++i) {
    EXPECT_TRUE(std::isfinite(run.losses[i])) << "step " << i + 1;
    EXPECT_GT(run.steps[i].gpu_peak_bytes, 0) << "step " << i + 1;
    EXPECT_LE(run.steps[i].gpu_peak_bytes, budget) << "step " << i + 1;
  }
  EXPECT_LT(run.losses.back(), run.losses.front() - 0.1) << "the model did not learn";
}

// The CPU's part of a step (adding reduced gradients into the partition, scanning them, swapping
// them to NVMe, the optimizer) runs on threads of its own, never as a host function on the compute
// stream, where it would hold the device's next kernels until the CPU and the disk were done: at
// every stage, offloaded to CPU memory or to NVMe, with micro-batches accumulated (the adds) and
// with the optimizer overlapping backward.
TEST(ZeroStreams, NoHostFunctionRunsOnTheComputeStreamDuringAStep) {
  struct Placement {
    int stage;
    const char* optimizer;
    const char* params;
    bool overlap;
  };
  const Placement placements[] = {{0, "none", "none", false}, {1, "cpu", "none", false},
                                  {2, "cpu", "none", false},  {3, "none", "none", false},
                                  {3, "cpu", "cpu", false},   {3, "cpu", "none", true},
                                  {3, "nvme", "none", false}, {3, "nvme", "nvme", true}};
  for (const Placement& placement : placements) {
    SCOPED_TRACE(fmt::format("stage {}, optimizer on {}, parameters on {}{}", placement.stage,
                             placement.optimizer, placement.params,
                             placement.overlap ? ", overlapped" : ""));
    TempDirectory swap;
    nlohmann::json config = base_config(2, 2);
    config["zero_optimization"]["stage"] = placement.stage;
    if (std::string(placement.optimizer) != "none")
      config["zero_optimization"]["offload_optimizer"] =
          offload_section(placement.optimizer, swap.string(), false);
    if (std::string(placement.params) != "none")
      config["zero_optimization"]["offload_param"] =
          offload_section(placement.params, swap.string(), true);
    config["zero_optimization"]["sub_group_size"] = 4096;
    config["strata"]["overlap_optimizer"] = placement.overlap;
    config["strata"]["job_name"] = job_name_for_test();
    const TrainedRun run = train(config, Ranks::world, 2);
    for (std::size_t step = 0; step < run.compute_host_functions.size(); ++step)
      EXPECT_EQ(run.compute_host_functions[step], 0) << "step " << step + 1;
  }
}

}  // namespace
}  // namespace strata::engine::zero_testing

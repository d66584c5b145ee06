// The step's loss under a loss mask (engine/loss_tokens.h): the mean over the step's unmasked
// targets on every micro-batch and rank, so that 4 micro-batches of accumulation equal one batch
// of the same 4 and a world of ranks equals one rank holding its whole batch, whatever share of
// each micro-batch is masked; a step with no target in the loss has no gradient and a loss of 0.
// Runs in a world of one and under mpirun (2 and 4 ranks), every rank against a reference of one
// rank holding the whole batch. fp32, so that runs which only sum in another order agree to
// rounding, not bit for bit, since one batch of 4 rows sums its products in one matmul and 4
// micro-batches in 4: losses within 1e-6 and gradient norms within 1e-5 relative (measured at
// most 9e-8 and 4.3e-7 on 1, 2 and 4 ranks), parameters after two AdamW steps within 1e-4
// (measured at most 1.7e-5: Adam's first steps move a parameter by about lr x the sign of its
// gradient, so a gradient near 0 turns rounding into up to 2 x lr = 2e-3; the norms are the
// sharp check, the parameters the check of every element).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "engine/config/config.h"
#include "engine/engine.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "models/gpt/gpt.h"
#include "tests/engine/zero/zero_test_util.h"

namespace strata::engine::zero_testing {
namespace {

constexpr std::int64_t kSeqLen = 16;  // TinyModel's
constexpr std::int64_t kVocab = 256;

// How many leading positions of global row g are masked (a prompt), 0 to kSeqLen.
using MaskRule = std::function<std::int64_t(std::int64_t global_row)>;

// A different prompt length for every row of a step, one row wholly masked (row 3: 33 % 17 = 16)
// and one not at all (row 0), so that the micro-batches' counts differ and a mean of their
// means is not the step's mean.
std::int64_t varied_prompts(std::int64_t global_row) {
  return global_row * 11 % (kSeqLen + 1);
}

struct MaskedRun {
  std::vector<StepStats> steps;
  std::vector<double> evals;   // evaluate() over each step's batch, just before the step
  std::vector<float> initial;  // master parameters before the first step
  std::vector<float> params;   // after the last
  std::vector<std::int64_t> micro_loss_tokens;  // of this rank's first step, per micro-batch
};

// Noise tokens for global row g of step s, its first mask(g) targets -1.
void fill_row(int step, std::int64_t global_row, const MaskRule& mask,
              std::span<std::int32_t> inputs, std::span<std::int32_t> targets) {
  std::mt19937 rng(static_cast<std::uint32_t>(step * 7919 + global_row));
  const std::int64_t prompt = mask(global_row);
  for (std::int64_t t = 0; t < kSeqLen; ++t) {
    const auto at = static_cast<std::size_t>(t);
    inputs[at] = static_cast<std::int32_t>(rng() % kVocab);
    targets[at] = static_cast<std::int32_t>(rng() % kVocab);
    if (t < prompt) targets[at] = -1;
  }
}

// Trains `steps` steps of `config` (micro_batch rows, accumulation micro-batches) over `ranks`.
// Rank r's micro-batch k holds global rows k x world x micro_batch + r x micro_batch + [0,
// micro_batch), as the other ZeRO tests cut their batch: the union is the reference's one batch.
MaskedRun train_masked(const nlohmann::json& config_json, Ranks ranks, int steps,
                       const MaskRule& mask) {
  const int world = ranks == Ranks::local ? 1 : test_world().world_size();
  const Config config = parse_config(config_json, world).config;
  gpu::DeviceOptions options;
  options.memory_budget_bytes = std::int64_t{256} << 20;
  auto device = gpu::create_host_device(options);
  auto ops = gpu::create_ops(*device);
  std::unique_ptr<gpu::Comm> comm =
      ranks == Ranks::local ? create_local_comm() : gpu::create_comm(test_world(), *device);
  const std::int64_t micro_batch = config.batch.train_micro_batch_size_per_gpu;
  const std::int64_t accumulation = config.batch.gradient_accumulation_steps;
  const TinyModel shape;
  models::Gpt model({shape.n_layer, shape.n_head, shape.d_model, kSeqLen, kVocab, micro_batch});
  Runtime runtime{*device, *ops, *comm};
  Engine engine(runtime, config, model);
  MaskedRun run;
  run.initial = engine.master_parameters();
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(micro_batch * accumulation * kSeqLen));
  std::vector<std::int32_t> targets(inputs.size());
  for (int step = 1; step <= steps; ++step) {
    for (std::int64_t k = 0; k < accumulation; ++k) {
      std::int64_t in_micro = 0;
      for (std::int64_t row = 0; row < micro_batch; ++row) {
        const std::int64_t global = (k * world + comm->rank()) * micro_batch + row;
        const auto at = static_cast<std::size_t>((k * micro_batch + row) * kSeqLen);
        const auto length = static_cast<std::size_t>(kSeqLen);
        fill_row(step, global, mask, std::span(inputs).subspan(at, length),
                 std::span(targets).subspan(at, length));
        in_micro += kSeqLen - mask(global);
      }
      if (step == 1) run.micro_loss_tokens.push_back(in_micro);
    }
    run.evals.push_back(engine.evaluate(inputs, targets));
    run.steps.push_back(engine.train_batch(inputs, targets));
  }
  run.params = engine.master_parameters();
  return run;
}

// fp32 (the harness's config is bf16), `stage`, `micro_batch` rows x `accumulation`.
nlohmann::json fp32_config(std::int64_t micro_batch, std::int64_t accumulation, int stage) {
  nlohmann::json config = base_config(micro_batch, accumulation);
  config["bf16"]["enabled"] = false;
  config["zero_optimization"]["stage"] = stage;
  return config;
}

double relative(double got, double expected) {
  return std::abs(got - expected) / std::max(std::abs(expected), 1e-30);
}

void expect_runs_agree(const MaskedRun& run, const MaskedRun& reference) {
  ASSERT_EQ(run.steps.size(), reference.steps.size());
  for (std::size_t s = 0; s < run.steps.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s + 1));
    const StepStats& got = run.steps[s];
    const StepStats& expected = reference.steps[s];
    EXPECT_EQ(got.loss_tokens, expected.loss_tokens);
    EXPECT_EQ(got.tokens, expected.tokens);
    EXPECT_LT(relative(got.loss, expected.loss), 1e-6) << got.loss << " vs " << expected.loss;
    EXPECT_LT(relative(got.grad_norm, expected.grad_norm), 1e-5)
        << got.grad_norm << " vs " << expected.grad_norm;
    EXPECT_LT(relative(run.evals[s], reference.evals[s]), 1e-6);
    // evaluate() ran the same forward over the same parameters just before the step.
    EXPECT_LT(relative(run.evals[s], got.loss), 1e-6) << run.evals[s] << " vs " << got.loss;
  }
  ASSERT_EQ(run.params.size(), reference.params.size());
  float worst = 0.0f;
  for (std::size_t i = 0; i < run.params.size(); ++i)
    worst = std::max(worst, std::abs(run.params[i] - reference.params[i]));
  EXPECT_LT(worst, 1e-4f) << "largest parameter difference";
  std::printf("[ measured ] largest parameter difference %.3g, loss %.3g, grad_norm %.3g\n",
              static_cast<double>(worst),
              relative(run.steps.back().loss, reference.steps.back().loss),
              relative(run.steps.back().grad_norm, reference.steps.back().grad_norm));
}

// On one rank: one micro-batch of 4 rows against 4 micro-batches of a row each. On W ranks: the
// reference holds the 4W rows in one micro-batch; every rank 4 micro-batches of a row, and (W >
// 1) every rank one micro-batch of 4 rows. The micro-batches' counts of loss tokens differ, so
// a mean of micro-batch means would not agree.
TEST(LossMask, FourMicroBatchesEqualOneBatchOfFourOnAnyNumberOfRanks) {
  const int world = test_world().world_size();
  const MaskedRun reference =
      train_masked(fp32_config(4 * world, 1, 0), Ranks::local, 2, varied_prompts);
  const MaskedRun accumulated = train_masked(fp32_config(1, 4, 2), Ranks::world, 2, varied_prompts);
  const std::set<std::int64_t> counts(accumulated.micro_loss_tokens.begin(),
                                      accumulated.micro_loss_tokens.end());
  EXPECT_GT(counts.size(), 1u) << "the micro-batches must differ in loss tokens";
  EXPECT_LT(reference.steps[0].loss_tokens, reference.steps[0].tokens);
  expect_runs_agree(accumulated, reference);
  if (world > 1) {
    SCOPED_TRACE("one micro-batch of 4 rows per rank");
    expect_runs_agree(train_masked(fp32_config(4, 1, 3), Ranks::world, 2, varied_prompts),
                      reference);
  }
}

// Row 3 of the step is masked whole: the step with it weighs exactly what the step of rows 0-2
// alone weighs. A loss or a gradient divided by the rows (or the targets) rather than by the
// targets in the loss would be 4/3 of this one's; the other tests compare runs that would share
// such a factor.
TEST(LossMask, ARowMaskedWholeWeighsNothing) {
  if (test_world().world_size() > 1) GTEST_SKIP() << "one rank holds both batches";
  const MaskedRun four = train_masked(fp32_config(4, 1, 0), Ranks::local, 2, varied_prompts);
  const MaskedRun three = train_masked(fp32_config(3, 1, 0), Ranks::local, 2, varied_prompts);
  EXPECT_EQ(four.steps[0].tokens, 4 * kSeqLen);
  EXPECT_EQ(three.steps[0].tokens, 3 * kSeqLen);
  MaskedRun same_tokens = three;
  for (StepStats& stats : same_tokens.steps)
    stats.tokens = 4 * kSeqLen;
  expect_runs_agree(same_tokens, four);
}

// With several ranks, a rank whose every target is masked (rows 4.. are rank 1's and up) still
// seeds its share of the step (none) and the others divide by the step's count, not their own.
TEST(LossMask, ARankWithNoTargetInTheLossStillAgreesWithOneRank) {
  const int world = test_world().world_size();
  if (world == 1) GTEST_SKIP() << "needs a second rank";
  const MaskRule rank0_only = [](std::int64_t row) {
    return row >= 4 ? kSeqLen : varied_prompts(row);
  };
  const MaskedRun reference =
      train_masked(fp32_config(4 * world, 1, 0), Ranks::local, 2, rank0_only);
  expect_runs_agree(train_masked(fp32_config(4, 1, 2), Ranks::world, 2, rank0_only), reference);
}

// Every target masked on every rank: a loss of 0 with 0 loss tokens, no gradient, and (without
// weight decay) not one parameter changed; evaluate() says 0 too. Then with no target masked,
// every token is a loss token.
TEST(LossMask, AStepWithNoTargetInTheLossHasNoGradientAndALossOf0) {
  nlohmann::json config = fp32_config(2, 2, 2);
  config["optimizer"]["params"]["weight_decay"] = 0.0;
  const MaskedRun run = train_masked(config, Ranks::world, 1, [](std::int64_t) { return kSeqLen; });
  const StepStats& stats = run.steps[0];
  EXPECT_EQ(stats.loss, 0.0);
  EXPECT_EQ(stats.loss_tokens, 0);
  EXPECT_EQ(stats.grad_norm, 0.0);
  EXPECT_FALSE(stats.skipped);
  EXPECT_EQ(run.evals[0], 0.0);
  EXPECT_EQ(run.params, run.initial);

  const MaskedRun plain = train_masked(config, Ranks::world, 1, [](std::int64_t) { return 0; });
  EXPECT_EQ(plain.steps[0].loss_tokens, plain.steps[0].tokens);
  EXPECT_GT(plain.steps[0].grad_norm, 0.0);
}

}  // namespace
}  // namespace strata::engine::zero_testing

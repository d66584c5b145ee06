// The engine at stage 0 on the host device: determinism, learning, and that checkpointing,
// precision and accumulation change what they should and nothing else.
#include "engine/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "engine/config/config.h"
#include "gpu/comm.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "gpu/process_group.h"
#include "models/data/token_dataset.h"
#include "models/gpt/gpt.h"
#include "tests/engine/test_world.h"

namespace strata::engine {
namespace {

using ::testing::HasSubstr;

// A tiny GPT and the config around it; `extra` is merged into the JSON at the top level.
Config tiny_config(const std::string& extra = "", double lr = 1e-2) {
  std::string text = R"({
    "train_micro_batch_size_per_gpu": 2,
    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": )" +
                     std::to_string(lr) + R"(, "weight_decay": 0.01}},
    "strata": {"model": {"n_layer": 2, "n_head": 2, "d_model": 32, "seq_len": 16, "vocab": 256},
               "seed": 7})" +
                     extra + "}";
  return parse_config_text(text, "test config").config;
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<float> params;
};

gpu::World& world() {
  return testing::test_world();
}

// Trains `steps` steps on a fixed pattern and returns the losses and final master weights.
TrainedRun train(const Config& config, int steps, std::int64_t budget = 256 << 20) {
  gpu::DeviceOptions options;
  options.memory_budget_bytes = budget;
  auto device = gpu::create_host_device(options);
  auto ops = gpu::create_ops(*device);
  auto comm = gpu::create_comm(world(), *device);
  const ModelConfig& m = config.strata.model;
  models::Gpt model({m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab,
                     config.batch.train_micro_batch_size_per_gpu});
  TrainedRun run;
  {
    Runtime runtime{*device, *ops, *comm};
    Engine engine(runtime, config, model);
    // "the quick brown fox..." repeated: structure a tiny model learns quickly.
    std::string text;
    while (text.size() < 4096)
      text += "the quick brown fox jumps over the lazy dog. ";
    std::vector<std::uint16_t> tokens(text.begin(), text.end());
    std::int64_t micro_tokens = model.tokens_per_micro_batch();
    std::int64_t accumulation = config.batch.gradient_accumulation_steps;
    std::vector<std::int32_t> inputs(static_cast<std::size_t>(micro_tokens * accumulation));
    std::vector<std::int32_t> targets(inputs.size());
    for (int step = 1; step <= steps; ++step) {
      // One global batch of micro * accumulation sequences, cut the same way whatever the split.
      std::int64_t per_micro = config.batch.train_micro_batch_size_per_gpu;
      for (std::int64_t micro = 0; micro < accumulation; ++micro) {
        const std::int64_t first = models::first_sequence(micro, 0, 1, per_micro);
        const auto at = static_cast<std::size_t>(first * m.seq_len);
        const auto length = static_cast<std::size_t>(per_micro * m.seq_len);
        models::sample_sequences(tokens, 3, step, first, static_cast<int>(per_micro),
                                 static_cast<int>(m.seq_len), std::span(inputs).subspan(at, length),
                                 std::span(targets).subspan(at, length));
      }
      run.losses.push_back(engine.train_batch(inputs, targets).loss);
    }
    run.params = engine.master_parameters();
  }
  return run;
}

TEST(EngineStage0, SameConfigGivesTheSameBits) {
  TrainedRun first = train(tiny_config(), 5);
  TrainedRun second = train(tiny_config(), 5);
  EXPECT_EQ(first.losses, second.losses);
  EXPECT_EQ(first.params, second.params);
}

TEST(EngineStage0, StartsAtTheUniformLossAndLearns) {
  TrainedRun run = train(tiny_config(), 150);
  // Small initial weights give nearly uniform predictions over 256 bytes: loss ln(256) = 5.545.
  EXPECT_NEAR(run.losses.front(), std::log(256.0), 0.1);
  // The sentence repeats, so every byte but the first few of a window is predictable: the
  // loss must fall far below a unigram model's (about 2.9 nats for English letters).
  EXPECT_LT(run.losses.back(), 0.6) << "the model did not learn the repeated sentence";
}

TEST(EngineStage0, ActivationCheckpointingGivesIdenticalLosses) {
  TrainedRun plain = train(tiny_config(), 8);
  TrainedRun checkpointed =
      train(tiny_config(R"(, "activation_checkpointing": {"partition_activations": true})"), 8);
  EXPECT_EQ(plain.losses, checkpointed.losses);
  EXPECT_EQ(plain.params, checkpointed.params);
}

TEST(EngineStage0, Fp16WithLossScalingTracksBf16) {
  TrainedRun bf16 = train(tiny_config(R"(, "bf16": {"enabled": true})", 2e-3), 40);
  TrainedRun fp16 =
      train(tiny_config(R"(, "fp16": {"enabled": true, "initial_scale_power": 12})", 2e-3), 40);
  ASSERT_EQ(bf16.losses.size(), fp16.losses.size());
  for (std::size_t i = 0; i < bf16.losses.size(); ++i) {
    // Both round the weights the kernels see (8 vs 11 mantissa bits); the stated tolerance is
    // 3% of the loss per step over 40 steps.
    EXPECT_NEAR(fp16.losses[i], bf16.losses[i], 0.03 * bf16.losses[i]) << "step " << i + 1;
  }
}

TEST(EngineStage0, AccumulatingMicroBatchesMatchesOneLargeBatch) {
  TrainedRun large = train(tiny_config(), 5);  // micro-batch 2
  Config split = tiny_config(R"(, "gradient_accumulation_steps": 2)");
  split.batch.train_micro_batch_size_per_gpu = 1;
  TrainedRun accumulated = train(split, 5);
  ASSERT_EQ(large.params.size(), accumulated.params.size());
  for (std::size_t i = 0; i < large.params.size(); i += 97) {
    EXPECT_NEAR(accumulated.params[i], large.params[i], 1e-5) << "parameter " << i;
  }
}

// The optimizer kept on the device is one gpu::Ops step per sub-group (a kernel launch on CUDA,
// cpu_adam::step on the host backend). Its update is element by element, so cutting the partition
// into sub-groups changes no bit, for each optimizer.
TEST(EngineStage0, SteppingTheDeviceOptimizerBySubGroupsChangesNoBit) {
  for (OptimizerType type : {OptimizerType::adamw, OptimizerType::adagrad, OptimizerType::lion}) {
    Config whole = tiny_config(R"(, "bf16": {"enabled": true})", 2e-3);
    whole.optimizer.type = type;
    Config grouped = whole;
    grouped.zero.sub_group_size = 4096;
    const TrainedRun one = train(whole, 4);
    const TrainedRun many = train(grouped, 4);
    EXPECT_EQ(one.losses, many.losses) << static_cast<int>(type);
    EXPECT_EQ(one.params, many.params) << static_cast<int>(type);
    EXPECT_LT(one.losses.back(), one.losses.front()) << static_cast<int>(type);
  }
}

TEST(EngineStage0, OverBudgetNamesTheConfigKey) {
  try {
    train(tiny_config(), 1, 64 << 10);
    FAIL() << "expected a UserError";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("over the budget"));
    EXPECT_THAT(error.fix(), HasSubstr("strata.device_memory_budget"));
  }
}

// One rank, every stage and offload target against stage 0: the same kernels in the same order,
// so the losses agree to rounding (gradient accumulation order and the norm's summation differ).
void expect_tracks(const TrainedRun& reference, const TrainedRun& run, double tolerance) {
  ASSERT_EQ(reference.losses.size(), run.losses.size());
  for (std::size_t i = 0; i < run.losses.size(); ++i)
    EXPECT_NEAR(run.losses[i], reference.losses[i], tolerance * reference.losses[i])
        << "step " << i + 1;
  ASSERT_EQ(reference.params.size(), run.params.size());
  for (std::size_t i = 0; i < run.params.size(); ++i)
    ASSERT_NEAR(run.params[i], reference.params[i], 1e-4) << "parameter " << i;
}

std::string zero_section(int stage, const std::string& optimizer_device,
                         const std::string& param_device, const std::string& path) {
  auto offload = [&](const std::string& device, const std::string& extra = "") {
    return R"({"device": ")" + device + R"(", "nvme_path": ")" + path +
           R"(", "pin_memory": false)" + extra + "}";
  };
  std::string text = R"(, "zero_optimization": {"stage": )" + std::to_string(stage) +
                     R"(, "sub_group_size": 5000, "stage3_param_persistence_threshold": 0,
                     "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 100000)";
  if (optimizer_device != "none") text += R"(, "offload_optimizer": )" + offload(optimizer_device);
  if (param_device != "none")
    text += R"(, "offload_param": )" + offload(param_device, R"(, "max_in_cpu": 0)");
  return text + "}";
}

TEST(EngineZeroOneRank, EveryStageAndOffloadTracksStage0) {
  const std::string bf16 = R"(, "bf16": {"enabled": true})";
  TrainedRun reference = train(tiny_config(bf16), 12);
  std::string path = ::testing::TempDir();
  struct Case {
    int stage;
    const char* optimizer;
    const char* params;
  };
  for (Case c : {Case{1, "none", "none"}, Case{2, "cpu", "none"}, Case{3, "none", "none"},
                 Case{3, "cpu", "cpu"}, Case{3, "nvme", "nvme"}}) {
    SCOPED_TRACE(::testing::Message()
                 << "stage " << c.stage << " optimizer " << c.optimizer << " params " << c.params);
    Config config = tiny_config(bf16 + zero_section(c.stage, c.optimizer, c.params, path));
    config.strata.job_name = "engine-test-one-rank";  // its own swap directory under TempDir
    TrainedRun run = train(config, 12);
    expect_tracks(reference, run, 1e-5);
  }
}

TEST(EngineZeroOneRank, ParamOffloadWithoutOptimizerOffloadIsRefused) {
  try {
    Config config = tiny_config(zero_section(3, "none", "cpu", ::testing::TempDir()));
    config.strata.job_name = "engine-test-refused";
    train(config, 1);
    FAIL() << "expected a UserError";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("offload_param.device is cpu"));
    EXPECT_THAT(error.fix(), HasSubstr("offload_optimizer"));
  }
}

TEST(EngineZeroOneRank, OverlapOptimizerIsRefusedUntilImplemented) {
  try {
    Config config = tiny_config();
    config.strata.overlap_optimizer = true;
    train(config, 1);
    FAIL() << "expected a UserError";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("overlap_optimizer"));
  }
}

}  // namespace
}  // namespace strata::engine

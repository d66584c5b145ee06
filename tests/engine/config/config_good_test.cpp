// Realistic configs (Hugging Face templates, DeepSpeed tutorials, accelerate output, strata's own)
// load with the values their authors meant.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string_view>

#include "tests/engine/config/config_test_util.h"

namespace strata::engine {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::load_good;
using ::testing::Not;

TEST(ConfigGood, HuggingFaceZero2TemplateResolvesAuto) {
  LoadedConfig loaded = load_good("hf_zero2_auto.json");
  const Config& c = loaded.config;
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::cpu);
  EXPECT_TRUE(c.zero.offload_optimizer.pin_memory);
  EXPECT_EQ(c.zero.allgather_bucket_size, 200'000'000);
  EXPECT_EQ(c.zero.reduce_bucket_size, 512 * 512);  // "auto" = d_model^2, demo d_model 512
  EXPECT_TRUE(c.zero.overlap_comm);
  EXPECT_FALSE(c.fp16.enabled);  // "auto" resolves to off
  EXPECT_EQ(c.optimizer.type, OptimizerType::adamw);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[0], 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[1], 0.999);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0);
  EXPECT_EQ(c.scheduler.type, SchedulerType::warmup_lr);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_min_lr, 0);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 1e-3);
  // "auto": the HF Trainer's get_warmup_steps() with its defaults, warmup_steps 0 and
  // warmup_ratio 0 (a warm-up of 2 steps, DeepSpeed's least).
  EXPECT_EQ(c.scheduler.warmup_num_steps, 0);
  EXPECT_EQ(c.batch.train_micro_batch_size_per_gpu, 1);
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.batch.train_batch_size, 1);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.steps_per_print, 2000);
  EXPECT_THAT(loaded.warnings, IsEmpty());
}

TEST(ConfigGood, HuggingFaceZero3TemplateDerivesSizesFromDModel) {
  const Config c = load_good("hf_zero3_auto.json", 8).config;
  const std::int64_t h = 1024;
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.reduce_bucket_size, h * h);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 943'718);  // round(0.9 * 1024^2)
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 10 * h);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 1'000'000'000);
  EXPECT_EQ(c.zero.stage3_max_reuse_distance, 1'000'000'000);
  EXPECT_EQ(c.zero.sub_group_size, 1'000'000'000);
  EXPECT_TRUE(c.checkpoint.gather_16bit_weights_on_model_save);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::cpu);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::cpu);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_FALSE(c.bf16.enabled);  // bf16 "auto": off, as the HF Trainer without --bf16
  EXPECT_EQ(c.scheduler.type, SchedulerType::warmup_decay_lr);
  EXPECT_EQ(c.scheduler.total_num_steps, 5000);  // "auto" = strata.train_steps
  EXPECT_EQ(c.scheduler.warmup_num_steps, 0);    // "auto" = get_warmup_steps(): no warm-up keys
  EXPECT_EQ(c.batch.train_batch_size, 8);        // all "auto": micro 1, gas 1, 8 ranks
  EXPECT_EQ(c.strata.model.vocab, 50304);
}

TEST(ConfigGood, BareZero3TakesDeepSpeedDefaults) {
  const Config c = load_good("hf_zero3_bf16_no_offload.json", 2).config;
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::none);
  EXPECT_EQ(c.zero.offload_param.buffer_count, 5);
  EXPECT_EQ(c.zero.offload_param.buffer_size, 100'000'000);
  EXPECT_EQ(c.zero.offload_param.max_in_cpu, 1'000'000'000);
  EXPECT_EQ(c.zero.offload_optimizer.buffer_count, 4);
  EXPECT_TRUE(c.zero.offload_optimizer.pin_memory);
  EXPECT_EQ(c.zero.allgather_bucket_size, 500'000'000);
  EXPECT_TRUE(c.zero.contiguous_gradients);
  EXPECT_TRUE(c.zero.reduce_scatter);
  EXPECT_EQ(c.zero.stage3_model_persistence_threshold, INT64_MAX);
  EXPECT_EQ(c.batch.train_batch_size, 2 * 4 * 2);
  EXPECT_EQ(c.aio.block_size, 1'048'576);
  EXPECT_EQ(c.aio.queue_depth, 8);
  EXPECT_EQ(c.aio.intra_op_parallelism, 1);
  EXPECT_FALSE(c.aio.single_submit);
  EXPECT_TRUE(c.aio.overlap_events);
  EXPECT_TRUE(c.aio.verify);
}

TEST(ConfigGood, ZeroOffloadTutorial) {
  const Config c = load_good("ds_zero_offload_tutorial.json", 4).config;
  EXPECT_EQ(c.batch.train_micro_batch_size_per_gpu, 4);  // 16 / 4 ranks / 1
  EXPECT_EQ(c.optimizer.type, OptimizerType::adam);
  EXPECT_TRUE(c.optimizer.adam_w_mode);  // DeepSpeed's default: "Adam" runs AdamW
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1.5e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[1], 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.01);
  EXPECT_TRUE(c.fp16.enabled);
  EXPECT_DOUBLE_EQ(c.fp16.loss_scale, 0);
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::cpu);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);  // DeepSpeed's default since PR #8068
}

TEST(ConfigGood, DeprecatedCpuOffloadIsRewrittenWithWarnings) {
  LoadedConfig loaded = load_good("ds_legacy_cpu_offload.json");
  const Config& c = loaded.config;
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::cpu);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::none);
  EXPECT_FALSE(c.zero.offload_optimizer.pin_memory);
  EXPECT_EQ(c.zero.reduce_bucket_size, 50'000'000);
  EXPECT_EQ(c.fp16.initial_scale_power, 12);
  EXPECT_EQ(c.batch.train_batch_size, 8);
  ASSERT_EQ(loaded.warnings.size(), 2u);
  EXPECT_THAT(loaded.warnings[0], HasSubstr("zero_optimization.cpu_offload: deprecated"));
  EXPECT_THAT(loaded.warnings[1], HasSubstr("cpu_offload_use_pin_memory: deprecated"));
}

TEST(ConfigGood, ZeroInfinityNvmeTutorial) {
  const Config c = load_good("ds_zero_infinity_nvme.json").config;
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::nvme);
  EXPECT_EQ(c.zero.offload_param.nvme_path, "/local_nvme");
  EXPECT_EQ(c.zero.offload_param.buffer_size, 100'000'000);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::nvme);
  EXPECT_TRUE(c.zero.offload_optimizer.pipeline_read);
  EXPECT_TRUE(c.zero.offload_optimizer.pipeline_write);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 10'000'000);
  EXPECT_EQ(c.aio.block_size, 262'144);
  EXPECT_EQ(c.aio.queue_depth, 32);
  EXPECT_EQ(c.aio.intra_op_parallelism, 1);  // from thread_count
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 3e-7);
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_TRUE(c.zero.overlap_comm);  // null -> true at stage 3
}

TEST(ConfigGood, Zero3OffloadTutorial) {
  const Config c = load_good("ds_zero3_offload_tutorial.json", 4).config;
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 2);  // 64 / 8 / 4
  EXPECT_EQ(c.zero.sub_group_size, 1'000'000'000'000);
  EXPECT_EQ(c.fp16.initial_scale_power, 32);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::cpu);
  EXPECT_EQ(c.optimizer.type, OptimizerType::adamw);  // no optimizer section
}

TEST(ConfigGood, AccelerateZero2Bf16) {
  LoadedConfig loaded = load_good("accelerate_zero2_bf16.json", 2);
  const Config& c = loaded.config;
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_FALSE(c.zero.overlap_comm);  // null -> false below stage 3
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_EQ(c.batch.train_batch_size, 2);
  ASSERT_EQ(loaded.warnings.size(), 1u);
  EXPECT_THAT(loaded.warnings[0], HasSubstr("zero_allow_untested_optimizer"));
}

TEST(ConfigGood, AccelerateZero3Nvme) {
  const Config c = load_good("accelerate_zero3_nvme.json").config;
  EXPECT_EQ(c.zero.offload_param.nvme_path, "/mnt/nvme0");
  EXPECT_EQ(c.zero.offload_optimizer.nvme_path, "/mnt/nvme0");
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 4);
  EXPECT_EQ(c.batch.train_batch_size, 4);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 0.5);
}

TEST(ConfigGood, ShortAliasesAndOldNames) {
  const Config c = load_good("short_aliases.json").config;
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 300'000'000);
  EXPECT_EQ(c.zero.stage3_max_reuse_distance, 200'000'000);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 40'000'000);
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 50'000);
  EXPECT_EQ(c.zero.stage3_model_persistence_threshold, 10'000'000'000);
  EXPECT_TRUE(c.checkpoint.gather_16bit_weights_on_model_save);
  EXPECT_EQ(c.aio.intra_op_parallelism, 4);
  EXPECT_EQ(c.aio.queue_depth, 64);
  EXPECT_EQ(c.aio.block_size, 8'388'608);
}

TEST(ConfigGood, WarmupDecayWithL2Adam) {
  const Config c = load_good("warmup_decay_adam_l2.json", 4).config;
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 4);
  EXPECT_FALSE(c.optimizer.adam_w_mode);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 0);
  EXPECT_EQ(c.scheduler.total_num_steps, 100'000);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 2000);
  EXPECT_EQ(c.scheduler.warmup_type, WarmupType::linear);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 3e-4);
  EXPECT_EQ(c.zero.stage, 1);
}

TEST(ConfigGood, WarmupCosineWithLion) {
  const Config c = load_good("warmup_cosine_lion.json").config;
  EXPECT_EQ(c.optimizer.type, OptimizerType::lion);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[0], 0.95);
  EXPECT_EQ(c.scheduler.type, SchedulerType::warmup_cosine_lr);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_min_ratio, 0.01);
  EXPECT_DOUBLE_EQ(c.scheduler.cos_min_ratio, 0.1);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 500);
  EXPECT_EQ(c.scheduler.warmup_type, WarmupType::log);
  EXPECT_EQ(c.batch.train_batch_size, 32);
}

TEST(ConfigGood, OneCycleWithStaticLossScale) {
  const Config c = load_good("one_cycle_fp16_static.json").config;
  EXPECT_EQ(c.scheduler.type, SchedulerType::one_cycle);
  EXPECT_DOUBLE_EQ(c.scheduler.cycle_min_lr, 1e-5);
  EXPECT_DOUBLE_EQ(c.scheduler.cycle_max_lr, 1e-3);
  EXPECT_EQ(c.scheduler.cycle_first_step_size, 1000);
  EXPECT_EQ(c.scheduler.cycle_second_step_size, 1000);  // null = cycle_first_step_size
  EXPECT_DOUBLE_EQ(c.scheduler.cycle_min_mom, 0.85);
  EXPECT_DOUBLE_EQ(c.scheduler.cycle_max_mom, 0.99);
  EXPECT_EQ(c.scheduler.decay_step_size, 100);
  EXPECT_DOUBLE_EQ(c.fp16.loss_scale, 128);
  EXPECT_TRUE(c.fp16.consecutive_hysteresis);
  EXPECT_EQ(c.batch.train_micro_batch_size_per_gpu, 32);
}

TEST(ConfigGood, AdagradDefaults) {
  const Config c = load_good("adagrad_zero2.json").config;
  EXPECT_EQ(c.optimizer.type, OptimizerType::adagrad);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.05);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-10);  // CPUAdagrad's default
  EXPECT_EQ(c.batch.train_micro_batch_size_per_gpu, 4);
  EXPECT_FALSE(c.zero.offload_optimizer.pin_memory);
}

TEST(ConfigGood, StrataSection) {
  const Config c = load_good("strata_demo_nvme.json").config;
  EXPECT_EQ(c.strata.model.n_layer, 4);
  EXPECT_EQ(c.strata.model.d_model, 256);
  EXPECT_DOUBLE_EQ(c.strata.data.validation_fraction, 0.05);
  EXPECT_EQ(c.strata.seed, 42u);
  EXPECT_EQ(c.strata.train_steps, 300);
  EXPECT_EQ(c.strata.device_memory_budget, 64 << 20);
  EXPECT_TRUE(c.strata.overlap_optimizer);
  EXPECT_EQ(c.strata.job_name, "demo-run_1");
  EXPECT_EQ(c.scheduler.total_num_steps, 300);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 20);
  EXPECT_EQ(c.zero.sub_group_size, 4'000'000);
  EXPECT_EQ(c.zero.offload_param.buffer_count, 6);
  EXPECT_EQ(c.aio.intra_op_parallelism, 2);
}

// With the optimizer offloaded and nothing in the gradients able to change the step, stepping
// beside backward is exact, so it is the default, and said; a file's own choice stands, and a
// clipped (or overflow-checked) step keeps it off.
TEST(ConfigGood, OverlapOptimizerIsOnByDefaultWhereItIsExact) {
  const auto load = [](std::string_view extra) {
    return parse_config_text(
        fmt::format(R"({{"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0,
                       "bf16": {{"enabled": true, "check_grad_overflow": false}},
                       "zero_optimization": {{"stage": 2, "offload_optimizer": {{"device": "cpu"}}}}
                       {}}})",
                    extra),
        "config", 1);
  };
  const LoadedConfig exact = load("");
  EXPECT_TRUE(exact.config.strata.overlap_optimizer);
  EXPECT_THAT(exact.notes, Contains(HasSubstr("strata.overlap_optimizer is on: with "
                                              "offload_optimizer on cpu and a step the gradients "
                                              "cannot change")));
  const LoadedConfig declined = load(R"(, "strata": {"overlap_optimizer": false})");
  EXPECT_FALSE(declined.config.strata.overlap_optimizer);
  EXPECT_THAT(declined.notes, Not(Contains(HasSubstr("overlap_optimizer"))));
  const LoadedConfig clipped = parse_config_text(
      R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},
          "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})",
      "config", 1);
  EXPECT_FALSE(clipped.config.strata.overlap_optimizer);
  const LoadedConfig on_device = parse_config_text(
      R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0,
          "bf16": {"enabled": true, "check_grad_overflow": false}})",
      "config", 1);
  EXPECT_FALSE(on_device.config.strata.overlap_optimizer);
}

TEST(ConfigGood, CheckpointSections) {
  LoadedConfig loaded = load_good("checkpoint_sections.json");
  const CheckpointConfig& c = loaded.config.checkpoint;
  EXPECT_EQ(c.dir, "checkpoints/run1");
  EXPECT_EQ(c.every_steps, 100);
  EXPECT_EQ(c.keep_last, 3);
  EXPECT_EQ(c.tag_validation, CheckpointConfig::TagValidation::fail);  // written "fail"
  EXPECT_TRUE(c.load_universal);
  EXPECT_FALSE(c.use_node_local_storage);
  EXPECT_TRUE(c.gather_16bit_weights_on_model_save);  // from the deprecated fp16 name
  EXPECT_THAT(loaded.warnings, IsEmpty());
  EXPECT_THAT(loaded.notes, Contains(HasSubstr("checkpoint.load_universal: true changes nothing")));
  EXPECT_THAT(
      loaded.notes,
      Contains(AllOf(HasSubstr("zero_optimization.stage3_gather_fp16_weights_on_model_save: "
                               "true"),
                     HasSubstr("strata ckpt export"))));
}

TEST(ConfigGood, CheckpointDefaultsSaveNothingAndWarnOnTagMismatch) {
  const CheckpointConfig c = default_config().checkpoint;
  EXPECT_EQ(c.dir, "");
  EXPECT_EQ(c.every_steps, 0);
  EXPECT_EQ(c.keep_last, 0);
  EXPECT_EQ(c.tag_validation, CheckpointConfig::TagValidation::warn);  // DeepSpeed's default
  EXPECT_FALSE(c.load_universal);
  EXPECT_FALSE(c.use_node_local_storage);
  EXPECT_FALSE(c.gather_16bit_weights_on_model_save);
}

TEST(ConfigGood, NumbersWrittenAsStringsAndFloats) {
  const Config c = load_good("number_strings.json", 2).config;
  EXPECT_EQ(c.batch.train_batch_size, 64);
  EXPECT_EQ(c.batch.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 4);
  EXPECT_EQ(c.zero.reduce_bucket_size, 500'000'000);
  EXPECT_EQ(c.zero.allgather_bucket_size, 500'000'000);
  EXPECT_EQ(c.zero.sub_group_size, 1'000'000'000);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 1'500'000'000);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 50'000'000);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-5);
}

TEST(ConfigGood, UnknownTopLevelSectionsAreWarnings) {
  LoadedConfig loaded = load_good("top_level_warnings.json");
  // wandb is there but disabled: ignoring it changes nothing, so nothing is said.
  ASSERT_EQ(loaded.warnings.size(), 3u);
  for (const char* key : {"comms_logger", "flops_profiler", "tensorboard"})
    EXPECT_THAT(loaded.warnings,
                Contains(HasSubstr(std::string(key) + ": a DeepSpeed feature strata ignores")));
  const auto& checkpointing = loaded.config.activation_checkpointing;
  EXPECT_TRUE(checkpointing.partition_activations);
  EXPECT_TRUE(checkpointing.cpu_checkpointing);
  EXPECT_EQ(checkpointing.number_checkpoints, 4);
}

TEST(ConfigGood, TrainBatchAloneSplitsOverRanks) {
  const Config c = load_good("minimal_train_batch.json", 4).config;
  EXPECT_EQ(c.batch.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_FALSE(c.zero.overlap_comm);
}

TEST(ConfigGood, BooleanZeroOptimizationMeansStage1) {
  LoadedConfig loaded = load_good("zero1_deprecated_bool.json");
  EXPECT_EQ(loaded.config.zero.stage, 1);
  EXPECT_THAT(loaded.warnings, Contains(HasSubstr("boolean form is deprecated")));
}

// Every good fixture and every shipped config reads back from its own to_json unchanged.
TEST(ConfigGood, EveryConfigRoundTripsThroughToJson) {
  int count = 0;
  for (const char* folder : {"tests/engine/configs/good", "configs"}) {
    for (const auto& entry :
         std::filesystem::directory_iterator(std::filesystem::path(STRATA_SOURCE_DIR) / folder)) {
      if (entry.path().extension() != ".json") continue;
      SCOPED_TRACE(entry.path().string());
      const Config first = load_config_file(entry.path(), 2).config;
      const nlohmann::json resolved = to_json(first);
      const LoadedConfig again = parse_config(resolved, 2);
      EXPECT_EQ(to_json(again.config), resolved);
      EXPECT_THAT(again.warnings, IsEmpty());
      ++count;
    }
  }
  EXPECT_GE(count, 19);
}

TEST(ConfigGood, DefaultConfigIsWhatAMinimalFileGives) {
  const Config parsed = parse_config(nlohmann::json{{"train_micro_batch_size_per_gpu", 1}}).config;
  EXPECT_EQ(to_json(default_config()), to_json(parsed));
}

}  // namespace
}  // namespace strata::engine

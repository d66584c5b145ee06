// DeepSpeed's own reading rules, as configs in the wild rely on them: "auto" anywhere means the
// key's default (or what the HF Trainer fills in), values DeepSpeed validates are accepted with
// its meaning (sub_group_size 0, buffer_count 0), and DeepSpeed's keys that strata ignores are
// named as such, apart from typos.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/zero/flat_layout.h"
#include "tests/engine/config/config_test_util.h"

namespace strata::engine {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using testing::text_error;

LoadedConfig load(std::string_view text, int world_size = 1) {
  return parse_config_text(text, "config", world_size);
}

TEST(ConfigAuto, AnyKeyOfAnySectionTakesDeepSpeedsDefault) {
  LoadedConfig loaded = load(R"({
    "train_micro_batch_size_per_gpu": 2,
    "zero_optimization": {
      "stage": 3, "sub_group_size": "auto", "stage3_max_live_parameters": "auto",
      "stage3_max_reuse_distance": "auto", "allgather_bucket_size": "auto",
      "overlap_comm": "auto", "contiguous_gradients": "auto",
      "offload_param": {"device": "cpu", "buffer_size": "auto", "buffer_count": "auto",
                        "pin_memory": "auto", "max_in_cpu": "auto"},
      "offload_optimizer": {"device": "auto", "pipeline_read": "auto"}
    },
    "aio": {"block_size": "auto", "queue_depth": "auto", "single_submit": "auto"},
    "fp16": {"enabled": "auto", "loss_scale_window": "auto"},
    "activation_checkpointing": {"number_checkpoints": "auto"},
    "steps_per_print": "auto"
  })");
  const Config& c = loaded.config;
  const Config defaults = default_config();
  EXPECT_EQ(c.zero.sub_group_size, defaults.zero.sub_group_size);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 1'000'000'000);
  EXPECT_EQ(c.zero.stage3_max_reuse_distance, 1'000'000'000);
  EXPECT_EQ(c.zero.allgather_bucket_size, 500'000'000);
  EXPECT_TRUE(c.zero.overlap_comm);  // DeepSpeed's null: true at stage 3
  EXPECT_TRUE(c.zero.contiguous_gradients);
  EXPECT_EQ(c.zero.offload_param.buffer_size, 100'000'000);
  EXPECT_EQ(c.zero.offload_param.buffer_count, 5);
  EXPECT_TRUE(c.zero.offload_param.pin_memory);
  EXPECT_EQ(c.zero.offload_param.max_in_cpu, 1'000'000'000);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::none);
  EXPECT_EQ(c.aio.block_size, 1'048'576);
  EXPECT_EQ(c.aio.queue_depth, 8);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_FALSE(c.activation_checkpointing.number_checkpoints.has_value());
  EXPECT_EQ(c.steps_per_print, 10);
  EXPECT_THAT(loaded.warnings, IsEmpty());
  EXPECT_THAT(loaded.notes,
              Contains(AllOf(HasSubstr("zero_optimization.stage3_max_live_parameters: \"auto\" -> "
                                       "1000000000"),
                             HasSubstr("DeepSpeed's default"))));
  EXPECT_THAT(loaded.notes, Contains(HasSubstr("zero_optimization.offload_param.buffer_size: "
                                               "\"auto\" -> 100000000")));
  EXPECT_THAT(loaded.notes,
              Contains(HasSubstr("zero_optimization.offload_optimizer.device: \"auto\" -> "
                                 "\"none\"")));
}

TEST(ConfigAuto, PrecisionAutoIsFp32AsTheTrainerWithoutFlags) {
  const Config c = load(R"({"train_micro_batch_size_per_gpu": 1,
                            "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}})")
                       .config;
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_FALSE(c.bf16.enabled);
}

TEST(ConfigAuto, TrainerFilledKeysComeFromTheModelAndTheStrataSection) {
  LoadedConfig loaded = load(R"({
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto"}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": "auto"}},
    "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"},
    "strata": {"model": {"d_model": 256, "n_head": 4}, "micro_batch_size": 3, "lr": 2e-4}
  })",
                             4);
  const Config& c = loaded.config;
  EXPECT_EQ(c.batch.train_micro_batch_size_per_gpu, 3);
  EXPECT_EQ(c.batch.train_batch_size, 3 * 2 * 4);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 2e-4);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 2e-4);
  EXPECT_EQ(c.zero.reduce_bucket_size, 256 * 256);
  EXPECT_THAT(loaded.notes, Contains(HasSubstr("train_micro_batch_size_per_gpu: \"auto\" -> 3 "
                                               "(from strata.micro_batch_size)")));
  EXPECT_THAT(loaded.notes,
              Contains(HasSubstr("optimizer.params.lr: \"auto\" -> 0.0002 (from strata.lr)")));
  EXPECT_THAT(loaded.notes, Contains(HasSubstr("train_batch_size: \"auto\" -> 24")));
}

TEST(ConfigAuto, WithoutTheStrataSectionTheDefaultsAreNamed) {
  LoadedConfig loaded = load(R"({"train_micro_batch_size_per_gpu": "auto",
                                 "optimizer": {"type": "Adam", "params": {"lr": "auto"}}})");
  EXPECT_EQ(loaded.config.batch.train_micro_batch_size_per_gpu, 1);
  EXPECT_DOUBLE_EQ(loaded.config.optimizer.lr, 1e-3);
  EXPECT_THAT(loaded.notes, Contains(HasSubstr("set strata.micro_batch_size")));
  EXPECT_THAT(loaded.notes, Contains(HasSubstr("set strata.lr")));
}

TEST(ConfigAuto, StrataSectionMustAgreeWithValuesGivenOutright) {
  std::string message = text_error(R"({"train_micro_batch_size_per_gpu": 2,
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
      "strata": {"micro_batch_size": 4, "lr": 3e-4}})");
  EXPECT_THAT(message, HasSubstr("train_micro_batch_size_per_gpu: 2 (given) differs from "
                                 "strata.micro_batch_size 4"));
  EXPECT_THAT(message, HasSubstr("optimizer.params.lr: 0.0001 differs from strata.lr 0.0003"));
}

TEST(ConfigAuto, WhereNothingCanFillAutoItIsRefused) {
  EXPECT_THAT(text_error(R"({"train_batch_size": 1, "optimizer": {"type": "auto"}})"),
              HasSubstr("optimizer.type: got \"auto\", which has no default here"));
  EXPECT_THAT(text_error(R"({"train_batch_size": 1, "scheduler": {"type": "auto"}})"),
              HasSubstr("scheduler.type: got \"auto\", which has no default here"));
  EXPECT_THAT(text_error(R"({"train_batch_size": 1, "scheduler": {"type": "OneCycle",
                             "params": {"cycle_min_lr": "auto", "cycle_max_lr": 1e-3}}})"),
              HasSubstr("scheduler.params.cycle_min_lr: got \"auto\", which has no default"));
}

TEST(ConfigAuto, NotesSayWhereAValueCameFrom) {
  LoadedConfig derived = load(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": "auto",
                                  "gradient_accumulation_steps": 4, "strata": {"lr": "auto"}})",
                              2);
  EXPECT_EQ(derived.config.batch.train_micro_batch_size_per_gpu, 4);
  EXPECT_THAT(derived.notes, Contains(HasSubstr("train_micro_batch_size_per_gpu: \"auto\" -> 4 "
                                                "(train_batch_size / (gradient_accumulation_steps "
                                                "x world size))")));
  EXPECT_FALSE(derived.config.strata.lr.has_value());
  EXPECT_THAT(derived.notes, Not(Contains(HasSubstr("strata.lr: \"auto\" -> 0"))));
  // strata.micro_batch_size fills only "auto"; a micro-batch DeepSpeed derives must agree with it.
  EXPECT_THAT(text_error(R"({"train_batch_size": 16, "strata": {"micro_batch_size": 32}})"),
              HasSubstr("train_micro_batch_size_per_gpu: 16 (from train_batch_size and the "
                        "others) differs from strata.micro_batch_size 32"));
}

TEST(ConfigAuto, StrataLrSetsTheDefaultOptimizer) {
  const Config c = load(R"({"train_micro_batch_size_per_gpu": 1, "strata": {"lr": 5e-5}})").config;
  EXPECT_EQ(c.optimizer.type, OptimizerType::adamw);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 5e-5);
}

TEST(ConfigDeepSpeedValues, SubGroupSizeZeroIsOneSubGroupPerModuleShard) {
  const Config c = load(R"({"train_micro_batch_size_per_gpu": 1,
      "zero_optimization": {"stage": 3, "sub_group_size": 0,
                            "offload_optimizer": {"device": "cpu"}}})")
                       .config;
  EXPECT_EQ(c.zero.sub_group_size, 0);
  const std::vector<std::vector<ParamSpec>> modules = {
      {{"a.weight", {3000}}}, {{"b.weight", {10}}, {"b.bias", {5000}}}, {{"c.weight", {64}}}};
  zero::FlatLayout layout(modules, 2);
  std::vector<zero::Range> groups = zero::make_sub_groups(layout, c.zero.sub_group_size);
  ASSERT_EQ(groups.size(), 3u);
  for (int m = 0; m < 3; ++m) {
    const zero::ModuleSlice& slice = layout.module(m);
    EXPECT_EQ(groups[static_cast<std::size_t>(m)].begin, slice.partition_offset);
    EXPECT_EQ(groups[static_cast<std::size_t>(m)].size(), slice.shard_numel);
  }
  EXPECT_EQ(groups.back().end, layout.partition_numel());
  // Any other size cuts as before.
  EXPECT_EQ(zero::make_sub_groups(layout, 1'000'000'000).size(), 1u);
}

TEST(ConfigDeepSpeedValues, BufferCountZeroIsValidUnlessSwappingToNvme) {
  LoadedConfig loaded = load(R"({"train_micro_batch_size_per_gpu": 1,
      "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "buffer_count": 0},
                            "offload_optimizer": {"device": "cpu", "buffer_count": 0}}})");
  EXPECT_EQ(loaded.config.zero.offload_param.buffer_count, 1);
  EXPECT_EQ(loaded.config.zero.offload_optimizer.buffer_count, 1);
  EXPECT_THAT(loaded.notes, Contains(HasSubstr("offload_optimizer.buffer_count: 0 read as 1")));
  EXPECT_THAT(text_error(R"({"train_micro_batch_size_per_gpu": 1,
      "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/x",
                                                          "buffer_count": 0}}})"),
              HasSubstr("offload_param.buffer_count: 0 with device \"nvme\" leaves no buffer"));
}

TEST(ConfigDeepSpeedValues, ValuesDeepSpeedRejectsStayRefused) {
  EXPECT_THAT(text_error(R"({"train_micro_batch_size_per_gpu": 1,
                             "zero_optimization": {"sub_group_size": -1}})"),
              HasSubstr("zero_optimization.sub_group_size: got -1, expected an integer >= 0"));
  EXPECT_THAT(text_error(R"({"train_micro_batch_size_per_gpu": 1,
                             "zero_optimization": {"offload_optimizer": {"ratio": 1.5}}})"),
              HasSubstr("ratio: got 1.5"));
  EXPECT_THAT(text_error(R"({"train_micro_batch_size_per_gpu": 1, "amp": {"enabled": true}})"),
              HasSubstr("Apex AMP"));
}

TEST(ConfigIgnoredKeys, DeepSpeedFeaturesAreNamedNotCalledUnknown) {
  LoadedConfig loaded = load(R"({
    "train_micro_batch_size_per_gpu": 1,
    "zero_allow_untested_optimizer": true, "zero_force_ds_cpu_optimizer": true,
    "prescale_gradients": true, "compile": {"deepcompile": true},
    "tensor_parallel": {"autotp_size": 2}, "comms_config": {"verbose": true},
    "monitor_config": {"tensorboard": {"enabled": true}}, "data_types": {"grad_accum_dtype": "fp32"},
    "autotuning": {"enabled": true}, "sequence_parallel_size": 2
  })");
  for (const char* key : {"zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
                          "prescale_gradients", "compile", "tensor_parallel", "comms_config",
                          "monitor_config", "data_types", "autotuning", "sequence_parallel_size"}) {
    EXPECT_THAT(loaded.warnings,
                Contains(AllOf(HasSubstr(std::string(key) + ": a DeepSpeed feature strata ignores"),
                               Not(HasSubstr("unknown")))))
        << key;
  }
  EXPECT_EQ(loaded.warnings.size(), 10u);
  EXPECT_THAT(loaded.warnings, Contains(HasSubstr("every rank holds whole layers")));
}

TEST(ConfigIgnoredKeys, OffValuesAreSilentAndTyposKeepTheirHint) {
  LoadedConfig loaded = load(R"({
    "train_micro_batch_size_per_gpu": 1, "prescale_gradients": false,
    "gradient_predivide_factor": 1.0, "wandb": {"enabled": false}, "tensor_parallel": {"autotp_size": 1},
    "sequence_parallel_size": 1, "communication_data_type": null, "flops_profiler": {},
    "zero_alow_untested_optimizer": true
  })");
  ASSERT_EQ(loaded.warnings.size(), 1u);
  EXPECT_THAT(loaded.warnings[0],
              AllOf(HasSubstr("zero_alow_untested_optimizer: unknown top-level key"),
                    HasSubstr("did you mean \"zero_allow_untested_optimizer\"")));
}

// DeepSpeed upper-cases tag_validation before matching it (deepspeed/runtime/config.py).
TEST(ConfigCheckpoint, TagValidationIsMatchedWithoutCase) {
  using TagValidation = CheckpointConfig::TagValidation;
  const std::pair<const char*, TagValidation> cases[] = {{"Ignore", TagValidation::ignore},
                                                         {"IGNORE", TagValidation::ignore},
                                                         {"warn", TagValidation::warn},
                                                         {"Warn", TagValidation::warn},
                                                         {"fAiL", TagValidation::fail}};
  for (const auto& [written, expected] : cases) {
    const std::string text = std::string(R"({"train_batch_size": 1, "checkpoint": )") +
                             R"({"tag_validation": ")" + written + R"("}})";
    LoadedConfig loaded = load(text);
    EXPECT_EQ(loaded.config.checkpoint.tag_validation, expected) << written;
    EXPECT_THAT(loaded.warnings, IsEmpty()) << written;
  }
  EXPECT_THAT(text_error(R"({"train_batch_size": 1, "checkpoint": {"tag_validation": true}})"),
              HasSubstr("checkpoint.tag_validation: got true, expected one of \"Ignore\", "
                        "\"Warn\", \"Fail\""));
}

TEST(ConfigCheckpoint, SettingsStrataServesOtherwiseAreNamed) {
  LoadedConfig loaded = load(R"({
    "train_batch_size": 1,
    "checkpoint": {"load_universal": true, "use_node_local_storage": true,
                   "parallel_write": {"pipeline_stage": true},
                   "writer": {"type": "fast", "io_buffer_size": 1e8},
                   "checkpoint_serialization": false},
    "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true}
  })");
  const CheckpointConfig& c = loaded.config.checkpoint;
  EXPECT_TRUE(c.load_universal);
  EXPECT_TRUE(c.use_node_local_storage);
  EXPECT_TRUE(c.gather_16bit_weights_on_model_save);
  EXPECT_THAT(loaded.warnings,
              Contains(AllOf(HasSubstr("checkpoint.use_node_local_storage: true is not used"),
                             HasSubstr("shared file system"))));
  EXPECT_THAT(loaded.warnings,
              Contains(AllOf(HasSubstr("checkpoint.parallel_write.pipeline_stage: true"),
                             HasSubstr("no pipeline parallelism"))));
  EXPECT_THAT(loaded.warnings, Contains(HasSubstr("checkpoint.writer: DeepSpeed's checkpoint "
                                                  "writer (FastPersist) is not used")));
  EXPECT_THAT(loaded.warnings,
              Contains(HasSubstr("checkpoint.checkpoint_serialization: false is not used")));
  EXPECT_THAT(loaded.warnings, Not(Contains(HasSubstr("a DeepSpeed feature strata ignores"))));
  EXPECT_EQ(loaded.warnings.size(), 4u);
  EXPECT_THAT(loaded.notes, Contains(AllOf(HasSubstr("checkpoint.load_universal: true changes "
                                                     "nothing"),
                                           HasSubstr("any ZeRO stage, offload and world size"))));
  EXPECT_THAT(loaded.notes,
              Contains(AllOf(HasSubstr("zero_optimization.stage3_gather_16bit_weights_on_model_"
                                       "save: true"),
                             HasSubstr("strata ckpt export DIR --out FILE.safetensors"))));
}

TEST(ConfigCheckpoint, DeepSpeedDefaultsAndNamesAreSilent) {
  LoadedConfig loaded = load(R"({
    "train_batch_size": 1,
    "checkpoint": {"tag_validation": "Warn", "load_universal": false,
                   "use_node_local_storage": false, "parallel_write": {"pipeline_stage": false},
                   "writer": null, "checkpoint_serialization": true},
    "zero_optimization": {"stage": 3, "gather_16bit_weights_on_model_save": false}
  })");
  EXPECT_THAT(loaded.warnings, IsEmpty());
  EXPECT_THAT(loaded.notes, IsEmpty());
  EXPECT_THAT(text_error(R"({"train_batch_size": 1,
                             "checkpoint": {"parallel_write": {"pipeline_stages": true}}})"),
              HasSubstr("checkpoint.parallel_write.pipeline_stages: unknown key; did you mean "
                        "\"pipeline_stage\""));
  EXPECT_THAT(text_error(R"({"train_batch_size": 1, "checkpoint": {"writer": {"typ": "fast"}}})"),
              HasSubstr("checkpoint.writer.typ: unknown key"));
}

TEST(ConfigCheckpoint, AScheduleWithoutADirectoryIsAWarning) {
  LoadedConfig loaded = load(R"({"train_batch_size": 1,
                                 "strata": {"checkpoint": {"every_steps": 50}}})");
  EXPECT_EQ(loaded.config.checkpoint.every_steps, 50);
  EXPECT_THAT(loaded.warnings, Contains(AllOf(HasSubstr("strata.checkpoint: every_steps 50"),
                                              HasSubstr("without dir; nothing is saved"))));
  EXPECT_THAT(text_error(R"({"train_batch_size": 1, "strata": {"checkpoint": {"dirr": "x"}}})"),
              HasSubstr("strata.checkpoint.dirr: unknown key; did you mean \"dir\""));
}

}  // namespace
}  // namespace strata::engine

// Accelerate configs read with Accelerate's own mapping to DeepSpeed keys, and the refusals that
// say what a file is when it is not a config strata reads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "tests/aio/aio_test_support.h"
#include "tests/engine/config/config_test_util.h"

namespace strata::engine {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;

class ConfigAccelerate : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::string& name, std::string_view text) {
    std::filesystem::path path = dir_ / name;
    std::ofstream(path) << text;
    return path;
  }

  LoadedConfig load_yaml(std::string_view text, int world_size = 1) {
    return load_config_file(write("accelerate.yaml", text), world_size);
  }

  std::string error_of(std::string_view text, const std::string& name = "accelerate.yaml") {
    try {
      load_config_file(write(name, text));
    } catch (const ConfigError& error) {
      return error.what();
    }
    ADD_FAILURE() << text << " loaded, but should be refused";
    return "";
  }

  aio::testing::TempDir temp_;
  const std::filesystem::path& dir_ = temp_.path();
};

TEST_F(ConfigAccelerate, DeepSpeedKeysMapAsAccelerateMapsThem) {
  LoadedConfig loaded = load_yaml(R"(compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config:
  gradient_accumulation_steps: 4
  gradient_clipping: 0.5
  offload_optimizer_device: cpu
  offload_param_device: cpu
  zero3_init_flag: true
  zero3_save_16bit_model: true
  zero_stage: 3
distributed_type: DEEPSPEED
downcast_bf16: 'no'
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
use_cpu: false
)",
                                  2);
  const Config& c = loaded.config;
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::cpu);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::cpu);
  EXPECT_TRUE(c.checkpoint.gather_16bit_weights_on_model_save);
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 4);
  EXPECT_EQ(c.batch.train_micro_batch_size_per_gpu, 1);  // left to the script: strata's default
  EXPECT_EQ(c.batch.train_batch_size, 8);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 0.5);
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_EQ(c.optimizer.type, OptimizerType::adamw);
  EXPECT_TRUE(loaded.warnings.empty()) << loaded.warnings.front();
  EXPECT_THAT(loaded.notes, Contains(HasSubstr("train_micro_batch_size_per_gpu: \"auto\" -> 1 "
                                               "(strata's default; set strata.micro_batch_size)")));
  EXPECT_THAT(loaded.notes, Contains(HasSubstr("optimizer: left to the training script")));
  EXPECT_THAT(loaded.notes, Contains(HasSubstr("compute_environment, debug, machine_rank")));
}

TEST_F(ConfigAccelerate, DefaultsAreAcceleratesAndTheStrataSectionFillsTheScriptsPart) {
  LoadedConfig loaded = load_yaml(R"(distributed_type: DEEPSPEED
deepspeed_config:
  offload_optimizer_device: cpu
mixed_precision: fp16
strata:
  micro_batch_size: 4
  lr: 3.0e-5
  model: {n_layer: 2, n_head: 4, d_model: 128}
)");
  const Config& c = loaded.config;
  EXPECT_EQ(c.zero.stage, 2);  // Accelerate's default stage
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::cpu);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::none);
  EXPECT_TRUE(c.fp16.enabled);
  EXPECT_TRUE(c.fp16.auto_cast);
  EXPECT_EQ(c.batch.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 1);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-5);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);  // "auto": the HF Trainer's max_grad_norm
  EXPECT_EQ(c.strata.model.d_model, 128);
  EXPECT_THAT(loaded.notes, Contains(HasSubstr("from strata.micro_batch_size")));
}

TEST_F(ConfigAccelerate, NvmePathsGoToTheirOffloadSections) {
  const Config c = load_yaml(R"(distributed_type: DEEPSPEED
deepspeed_config:
  zero_stage: 3
  offload_optimizer_device: nvme
  offload_optimizer_nvme_path: /local_nvme
  offload_param_device: nvme
  offload_param_nvme_path: /other_nvme
)")
                       .config;
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::nvme);
  EXPECT_EQ(c.zero.offload_optimizer.nvme_path, "/local_nvme");
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::nvme);
  EXPECT_EQ(c.zero.offload_param.nvme_path, "/other_nvme");
}

TEST_F(ConfigAccelerate, DeepSpeedConfigFileIsTheDeepSpeedConfig) {
  write("ds_z3.json", R"({"train_micro_batch_size_per_gpu": "auto",
    "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
    "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
                          "stage3_max_live_parameters": "auto"}})");
  LoadedConfig loaded = load_yaml(R"(distributed_type: DEEPSPEED
deepspeed_config:
  deepspeed_config_file: ds_z3.json
  zero3_init_flag: true
num_processes: 1
)");
  const Config& c = loaded.config;
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::cpu);
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 1);
  EXPECT_FALSE(c.bf16.enabled);
  EXPECT_THAT(loaded.notes, Contains(HasSubstr("(deepspeed_config_file)")));
}

TEST_F(ConfigAccelerate, KeysBesideTheFileAreRefusedAsAccelerateRefusesThem) {
  write("ds.json", R"({"zero_optimization": {"stage": 2}})");
  std::string message = error_of(R"(distributed_type: DEEPSPEED
deepspeed_config:
  deepspeed_config_file: ds.json
  zero_stage: 3
mixed_precision: bf16
)");
  EXPECT_THAT(message, HasSubstr("deepspeed_config.zero_stage: given beside "
                                 "deepspeed_config_file, which Accelerate refuses"));
  EXPECT_THAT(message, HasSubstr("mixed_precision: given beside"));
  write("no_zero.json", R"({"train_micro_batch_size_per_gpu": 1})");
  EXPECT_THAT(error_of("distributed_type: DEEPSPEED\ndeepspeed_config:\n  "
                       "deepspeed_config_file: no_zero.json\n"),
              HasSubstr("has no zero_optimization section, which Accelerate requires"));
  EXPECT_THAT(error_of("distributed_type: DEEPSPEED\ndeepspeed_config:\n  "
                       "deepspeed_config_file: missing.json\n"),
              AllOf(HasSubstr("deepspeed_config.deepspeed_config_file: missing.json: no such file"),
                    HasSubstr("beside accelerate.yaml")));
}

TEST_F(ConfigAccelerate, WhatStrataCannotRunIsRefusedByItsAccelerateKey) {
  EXPECT_THAT(error_of("distributed_type: MULTI_GPU\nnum_processes: 2\n"),
              AllOf(HasSubstr("distributed_type: got \"MULTI_GPU\", expected \"DEEPSPEED\""),
                    HasSubstr("zero_stage: 0 is plain data parallelism")));
  EXPECT_THAT(error_of("distributed_type: DEEPSPEED\nmixed_precision: fp8\n"),
              HasSubstr("mixed_precision: \"fp8\" (FP8 training) is not supported by strata"));
  EXPECT_THAT(error_of("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n  "
                       "offload_param_device: nvme\n"),
              HasSubstr("deepspeed_config.offload_param_nvme_path: missing"));
  EXPECT_THAT(error_of("distributed_type: DEEPSPEED\ndeepspeed_config:\n  "
                       "offload_param_device: disk\n"),
              HasSubstr("deepspeed_config.offload_param_device: got \"disk\""));
}

TEST_F(ConfigAccelerate, NumProcessesOtherThanTheWorldIsWarnedAbout) {
  LoadedConfig loaded = load_yaml("distributed_type: DEEPSPEED\nnum_processes: 8\n");
  EXPECT_THAT(loaded.warnings, Contains(HasSubstr("start it with mpirun -np 8")));
}

TEST_F(ConfigAccelerate, UnknownKeysAreNamedWithTheNearestKnownOne) {
  // Inside deepspeed_config Accelerate's launcher ignores what it does not know: a warning.
  LoadedConfig loaded =
      load_yaml("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stge: 3\n");
  EXPECT_THAT(loaded.warnings, Contains(AllOf(HasSubstr("deepspeed_config.zero_stge: unknown key"),
                                              HasSubstr("did you mean \"zero_stage\""))));
  // At the top of the file Accelerate refuses unknown keys, and so does strata: a typo there
  // would otherwise drop the whole DeepSpeed block.
  EXPECT_THAT(error_of("distributed_type: DEEPSPEED\ndeepspeed_confg:\n  zero_stage: 3\n"),
              AllOf(HasSubstr("deepspeed_confg: unknown key"),
                    HasSubstr("did you mean \"deepspeed_config\"")));
}

TEST_F(ConfigAccelerate, AutoInTheDeepSpeedFileTakesAcceleratesDefaults) {
  write("auto.json", R"({"zero_optimization": {"stage": "auto",
                          "offload_optimizer": {"device": "auto"}}})");
  LoadedConfig loaded = load_yaml(
      "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: auto.json\n");
  EXPECT_EQ(loaded.config.zero.stage, 2);
  EXPECT_EQ(loaded.config.zero.offload_optimizer.device, OffloadDevice::none);
  EXPECT_THAT(loaded.notes, Contains(HasSubstr("zero_optimization.stage: \"auto\" -> 2 "
                                               "(Accelerate's default)")));
}

TEST_F(ConfigAccelerate, ProblemsAreNamedWhereTheyWereWritten) {
  write("bad.json", R"({"train_micro_batch_size_per_gpu": 0, "zero_optimization": {"stage": 2}})");
  std::string message = error_of(
      "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: bad.json\n");
  EXPECT_THAT(message, AllOf(HasSubstr("bad.json"), HasSubstr("train_micro_batch_size_per_gpu")));
  EXPECT_THAT(error_of("distributed_type: DEEPSPEED\ndeepspeed_config:\n  "
                       "gradient_accumulation_steps: 0\n"),
              HasSubstr("deepspeed_config.gradient_accumulation_steps: got 0"));
}

TEST_F(ConfigAccelerate, TheOlderFp16KeyMeansMixedPrecisionFp16) {
  EXPECT_TRUE(load_yaml("distributed_type: DEEPSPEED\nfp16: true\n").config.fp16.enabled);
}

TEST_F(ConfigAccelerate, AcceleratesJsonFormIsReadTheSameWay) {
  LoadedConfig loaded = load_config_file(write("accelerate.json", R"({
    "compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED",
    "deepspeed_config": {"zero_stage": 1}, "mixed_precision": "no"})"));
  EXPECT_EQ(loaded.config.zero.stage, 1);
  EXPECT_FALSE(loaded.config.bf16.enabled);
}

TEST_F(ConfigAccelerate, FilesThatAreNotConfigsSaySoAndWhy) {
  EXPECT_THAT(error_of("learning_rate: 3\nepochs: 2\n"),
              HasSubstr("YAML, but not an Accelerate config (no distributed_type)"));
  EXPECT_THAT(error_of("distributed_type: DEEPSPEED\nkey: value: other\n"),
              AllOf(HasSubstr("line 2, column"), HasSubstr("neither JSON nor YAML")));
  EXPECT_THAT(error_of("just some words\n"), HasSubstr("YAML, but not an Accelerate config"));
  std::string deep =
      "distributed_type: DEEPSPEED\nx: " + std::string(100, '[') + std::string(100, ']') + "\n";
  EXPECT_THAT(error_of(deep), HasSubstr("nested deeper than 64 levels"));
  EXPECT_THAT(error_of("distributed_type: DEEPSPEED\nmain_process_ip: \"\xff\"\n"),
              HasSubstr("line 2, column 19: a byte that is not UTF-8"));
  // A JSON file may start with a UTF-8 byte order mark.
  EXPECT_EQ(load_config_file(write("bom.json", "\xEF\xBB\xBF{\"train_batch_size\": 4}"))
                .config.batch.train_batch_size,
            4);
  // A file far larger than a config (a token file given by mistake) is refused unread.
  std::string large(17 << 20, ' ');
  EXPECT_THAT(error_of(large, "tokens.bin"), HasSubstr("larger than any config (16 MiB at most)"));
  // A broken JSON file stays a JSON error, with its position.
  EXPECT_THAT(error_of("{\"train_batch_size\": 8,\n}\n", "broken.json"),
              HasSubstr("line 2, column 1: malformed JSON"));
}

}  // namespace
}  // namespace strata::engine

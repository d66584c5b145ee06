// Configs the loader must refuse, each with its own message: the JSON path, the value given and
// what is allowed (or the nearest known key, or "not supported by strata" and what to do).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "tests/engine/config/config_test_util.h"

namespace strata::engine {
namespace {

using ::testing::AllOf;
using testing::bad_file_error;
using ::testing::HasSubstr;

struct BadCase {
  const char* file;
  std::vector<const char*> expected;  // each must appear in the message
  int world_size = 1;
};

std::ostream& operator<<(std::ostream& out, const BadCase& bad) {
  return out << bad.file;
}

class ConfigBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(ConfigBad, RefusedWithItsOwnMessage) {
  const BadCase& bad = GetParam();
  std::string message = bad_file_error(bad.file, bad.world_size);
  EXPECT_THAT(message, HasSubstr(bad.file)) << "the message names the file";
  for (const char* expected : bad.expected)
    EXPECT_THAT(message, HasSubstr(expected));
}

const BadCase bad_cases[] = {
    {"typo_stage3_key.json",
     {"zero_optimization.stage3_max_live_params: unknown key",
      "did you mean \"stage3_max_live_parameters\""}},
    {"typo_offload_key.json",
     {"zero_optimization.offload_param.pin_memroy: unknown key", "did you mean \"pin_memory\""}},
    {"typo_aio_key.json", {"aio.queue_deph: unknown key", "did you mean \"queue_depth\""}},
    {"typo_fp16_key.json",
     {"fp16.initial_scale_pow: unknown key", "did you mean \"initial_scale_power\""}},
    {"typo_optimizer_param.json",
     {"optimizer.params.weight_decy: unknown key", "did you mean \"weight_decay\""}},
    {"negative_buffer_count.json",
     {"zero_optimization.offload_param.buffer_count: got -1", "expected an integer from 0 to"}},
    {"fractional_bucket.json",
     {"zero_optimization.reduce_bucket_size: got 2.5", "expected an integer >= 0"}},
    {"string_bool.json",
     {"zero_optimization.overlap_comm: got \"true\"", "true or false (a JSON boolean"}},
    {"stage_out_of_range.json",
     {"zero_optimization.stage: got 4", "expected an integer from 0 to 3"}},
    {"bad_device.json",
     {"zero_optimization.offload_optimizer.device: got \"disk\"",
      "one of \"none\", \"cpu\", \"nvme\""}},
    {"nvme_without_path.json",
     {"zero_optimization.offload_param.nvme_path: missing", "device \"nvme\" needs"}},
    {"offload_param_stage2.json",
     {"zero_optimization.offload_param: device \"cpu\" needs stage 3", "stage is 2"}},
    {"nvme_optimizer_stage2.json",
     {"zero_optimization.offload_optimizer: device \"nvme\" at stage 2 is not supported",
      "use stage 3"}},
    {"batch_mismatch.json",
     {"Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
      "gradient_acc_step * world_size 32 != 4 * 4 * 1"}},
    {"batch_mismatch.json", {"32 != 4 * 4 * 3"}, 3},
    {"batch_missing.json",
     {"Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"}},
    {"batch_zero.json", {"train_batch_size: got 0", "expected an integer from 1"}},
    {"batch_indivisible.json", {"Gradient accumulation steps: 0 has to be greater than 0"}},
    {"fp16_and_bf16.json", {"fp16.enabled and bf16.enabled: both true is not supported"}},
    {"quantized_weights.json",
     {"zero_optimization.zero_quantized_weights: true (ZeRO++ quantized communication) is not "
      "supported by strata",
      "set it to false"}},
    {"hpz_partition.json",
     {"zero_optimization.zero_hpz_partition_size: 8", "not supported by strata", "set it to 1"}},
    {"mics_shard.json", {"zero_optimization.mics_shard_size: 8", "not supported by strata"}},
    {"ratio_partial.json",
     {"zero_optimization.offload_optimizer.ratio: 0.3", "not supported by strata", "set it to 1"}},
    {"use_gds.json", {"aio.use_gds: true (GPUDirect Storage) is not supported by strata"}},
    {"optimizer_lamb.json",
     {"optimizer.type: \"Lamb\"", "not supported by strata", "use \"AdamW\""}},
    {"optimizer_unknown.json",
     {"optimizer.type: got \"AdamWW\"", "one of \"Adam\", \"AdamW\", \"Adagrad\", \"Lion\""}},
    {"scheduler_lr_range_test.json",
     {"scheduler.type: \"LRRangeTest\"", "not supported by strata", "WarmupLR"}},
    {"amsgrad.json",
     {"optimizer.params.amsgrad: true (AMSGrad) is not supported by strata", "set it to false"}},
    {"max_grad_norm.json",
     {"optimizer.params.max_grad_norm: 'max_grad_norm' is not supported as an optimizer "
      "parameter",
      "'gradient_clipping'"}},
    {"alias_conflict.json",
     {"aio.intra_op_parallelism and aio.thread_count name the same setting but differ (4 vs 2)"}},
    {"bf16_alias_conflict.json", {"bf16 and bfloat16 name the same setting but differ"}},
    {"bf16_master_without_bf16.json",
     {"bf16.bf16_master_weights_and_grads", "set bf16.enabled true"}},
    {"bf16_states_without_master.json",
     {"bf16.bf16_optimizer_states", "requires bf16_master_weights_and_grads true"}},
    {"stage3_alias_conflict.json",
     {"zero_optimization.stage3_max_live_parameters and zero_optimization.max_live_parameters "
      "name the same setting"}},
    {"int_out_of_range.json",
     {"zero_optimization.stage3_max_live_parameters: got 1e+30", "expected an integer >= 0"}},
    {"block_size_unaligned.json", {"aio.block_size: got 1000000, expected a multiple of 4096"}},
    {"adagrad_betas.json",
     {"optimizer.params.betas: is not a parameter of Adagrad (it takes lr, eps, weight_decay)"}},
    {"betas_bad.json", {"optimizer.params.betas: got [0.9,1.5], expected two numbers in [0, 1)"}},
    {"decay_without_total.json",
     {"scheduler.params.total_num_steps: missing; WarmupDecayLR needs it"}},
    {"one_cycle_missing_lr.json",
     {"scheduler.params.cycle_min_lr: missing", "scheduler.params.cycle_max_lr: missing"}},
    {"scheduler_foreign_param.json",
     {"scheduler.params.cycle_min_lr: is not a parameter of WarmupLR"}},
    {"offload_foreign_key.json",
     {"zero_optimization.offload_param.pipeline_read: is a key of "
      "zero_optimization.offload_optimizer"}},
    {"deprecated_and_new.json",
     {"zero_optimization.cpu_offload: is the deprecated form of offload_optimizer"}},
    {"section_not_object.json", {"aio: got [1,2,3], expected an object"}},
    {"strata_model_heads.json", {"strata.model.d_model: 100 is not a multiple of n_head 8"}},
    {"strata_typo.json", {"strata.modle: unknown key", "did you mean \"model\""}},
    {"strata_budget_bad.json", {"strata.device_memory_budget: got \"lots\"", "a byte count >= 0"}},
    {"strata_job_name.json", {"strata.job_name: got \"../etc\""}},
    {"strata_checkpoint_negative.json",
     {"strata.checkpoint.every_steps: got -1, expected an integer >= 0",
      "strata.checkpoint.keep_last: got -2, expected an integer >= 0"}},
    {"checkpoint_tag_validation.json",
     {"checkpoint.tag_validation: got \"Strict\"", "one of \"Ignore\", \"Warn\", \"Fail\""}},
    {"checkpoint_typo.json",
     {"checkpoint.tag_validaton: unknown key", "did you mean \"tag_validation\""}},
    {"many_problems.json",
     {"4 problems", "train_micro_batch_size_per_gpu: got -2",
      "zero_optimization.offload_param.buffer_count: 0 with device \"nvme\" leaves no buffer",
      "zero_optimization.offload_param.nvme_path: missing", "aio.queue_depth: got 0"}},
    {"top_level_array.json", {"top level: got [1,2,3], expected a JSON object"}},
    {"offload_cpu_stage0.json",
     {"zero_optimization.offload_optimizer: device \"cpu\" needs ZeRO stage 1, 2 or 3"}},
    {"malformed.json", {"line 5, column 3: malformed JSON", "syntax error"}},
    {"duplicate_key.json", {"duplicate key \"stage\""}},
    {"empty.json", {"line 1, column 1: malformed JSON"}},
    // Found by config_fuzzer: nlohmann throws out_of_range, not parse_error, for this.
    {"number_overflow.json", {"malformed JSON: number overflow parsing '1e999'"}},
};

INSTANTIATE_TEST_SUITE_P(Fixtures, ConfigBad, ::testing::ValuesIn(bad_cases),
                         [](const ::testing::TestParamInfo<BadCase>& param_info) {
                           std::string name = param_info.param.file;
                           name = name.substr(0, name.find('.'));
                           return name + "_" + std::to_string(param_info.index);
                         });

// Every file in configs/bad is covered by a case above.
TEST(ConfigBadFixtures, EveryFileHasACase) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(testing::fixture("bad", ""))) {
    ++files;
    std::string name = entry.path().filename().string();
    bool covered = false;
    for (const auto& bad : bad_cases)
      covered = covered || name == bad.file;
    EXPECT_TRUE(covered) << name;
  }
  EXPECT_GE(files, 30);
}

TEST(ConfigBadFile, MissingFileNamesThePath) {
  try {
    load_config_file("/nonexistent/ds_config.json");
    FAIL() << "loaded a missing file";
  } catch (const ConfigError& error) {
    EXPECT_THAT(std::string(error.what()),
                AllOf(HasSubstr("/nonexistent/ds_config.json"), HasSubstr("no such file")));
    EXPECT_EQ(error.exit_status(), 2);
  }
}

TEST(ConfigBadFile, DirectoryIsRefused) {
  std::string message = bad_file_error("");
  EXPECT_THAT(message, HasSubstr("is a directory"));
}

TEST(ConfigBadFile, ErrorCarriesEveryProblemSeparately) {
  try {
    load_config_file(testing::fixture("bad", "many_problems.json"));
    FAIL();
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.problems().size(), 4u);
    EXPECT_THAT(error.fix(), HasSubstr("strata config check"));
  }
}

}  // namespace
}  // namespace strata::engine

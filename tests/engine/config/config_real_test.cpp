// Configs as users have them: DeepSpeed JSON and Accelerate YAML files copied from public
// repositories (configs/real/SOURCES.md, configs/accelerate/SOURCES.md name each one's source).
// Every one loads, except those that ask for what strata lacks or what DeepSpeed itself refuses
// today; those are refused with their own reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "tests/aio/aio_test_support.h"
#include "tests/engine/config/config_test_util.h"

namespace strata::engine {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

std::vector<std::string> fixtures(std::string_view kind, std::string_view extension) {
  std::vector<std::string> names;
  for (const auto& entry :
       std::filesystem::directory_iterator(testing::fixture(kind, "").parent_path()))
    if (entry.path().extension() == extension) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The real configs strata refuses, and why: each reason is DeepSpeed's own refusal today or a
// feature strata does not have.
const std::map<std::string, std::string> refused = {
    // DeepSpeed's optimizer list lacks DeepSpeed_Adam; strata's has no LAMB.
    {"microsoft_deepspeedexamples_ds_zero_offload_config.json",
     "optimizer.type: got \"DeepSpeed_Adam\""},
    {"microsoft_deepspeedexamples_deepspeed_bsz64k_lamb_config_seq128.json",
     "\"Lamb\" (strata's CPU optimizers are Adam, AdamW, Adagrad and Lion)"},
    {"microsoft_deepspeedexamples_ds_config.json", "fp16_master_weights_and_grads: true"},
    // Misspelled keys, which DeepSpeed's pydantic models refuse too (extra="forbid").
    {"microsoft_deepspeedexamples_ds_zero_stage_3_config.json",
     "stage3_param_persitence_threshold: unknown key; did you mean "
     "\"stage3_param_persistence_threshold\""},
    {"microsoft_deepspeedexamples_ds_zero_stage_3_config_release.json",
     "cpu_offload_params: unknown key; did you mean \"cpu_offload_param\""},
    {"microsoft_deepspeedexamples_ds_zero_stage_infinity_config.json",
     "stage3_param_persitance_threshold: unknown key"},
    // fp16's loss-scaling keys in the bf16 section, which DeepSpeed's bf16 model refuses.
    {"hiyouga_llama_factory_ds_z3_alst_config.json", "bf16.loss_scale: is a key of fp16"},
};

class RealDeepSpeedConfig : public ::testing::TestWithParam<std::string> {};

TEST_P(RealDeepSpeedConfig, LoadsOrIsRefusedForItsOwnReason) {
  const std::string& name = GetParam();
  const auto path = testing::fixture("real", name);
  auto reason = refused.find(name);
  if (reason == refused.end()) {
    EXPECT_NO_THROW(load_config_file(path, 1));
    return;
  }
  try {
    load_config_file(path, 1);
    ADD_FAILURE() << name << " loaded, but strata cannot run it";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr(reason->second));
  }
}

// A file name as a test name: no extension, '_' for what gtest does not allow.
std::string test_name(const ::testing::TestParamInfo<std::string>& file) {
  std::string name = file.param.substr(0, file.param.rfind('.'));
  std::replace(name.begin(), name.end(), '-', '_');
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(Files, RealDeepSpeedConfig, ::testing::ValuesIn(fixtures("real", ".json")),
                         test_name);

TEST(RealDeepSpeedConfig, AtLeastTenOfThemAndTheyKeepTheirAuthorsMeaning) {
  EXPECT_GE(fixtures("real", ".json").size() - refused.size(), 10u);
  // axolotl's stage-3 configs: sub_group_size 0 and unprefixed stage-3 names.
  const Config axolotl =
      load_config_file(testing::fixture("real", "axolotl_ai_cloud_axolotl_zero3_bf16.json")).config;
  EXPECT_EQ(axolotl.zero.sub_group_size, 0);
  EXPECT_EQ(axolotl.zero.stage3_max_live_parameters, 0);
  EXPECT_TRUE(axolotl.checkpoint.gather_16bit_weights_on_model_save);
  // LLaMA-Factory: DeepSpeed features strata ignores are warned about by name.
  LoadedConfig factory =
      load_config_file(testing::fixture("real", "hiyouga_llama_factory_ds_z3_offload_config.json"));
  EXPECT_THAT(factory.warnings,
              Contains(HasSubstr("zero_allow_untested_optimizer: a DeepSpeed feature")));
  EXPECT_THAT(factory.warnings, Contains(HasSubstr("comms_config: a DeepSpeed feature")));
  EXPECT_EQ(factory.config.zero.offload_param.device, OffloadDevice::cpu);
  // transformers' template: the legacy fp16 name of the 16-bit gather.
  const Config hf =
      load_config_file(testing::fixture("real", "huggingface_transformers_ds_config_zero3.json"))
          .config;
  EXPECT_TRUE(hf.checkpoint.gather_16bit_weights_on_model_save);
  EXPECT_FALSE(hf.fp16.enabled);
}

class RealAccelerateConfig : public ::testing::TestWithParam<std::string> {};

TEST_P(RealAccelerateConfig, Loads) {
  const std::string& name = GetParam();
  const int world = 1;
  EXPECT_NO_THROW(load_config_file(testing::fixture("accelerate", name), world));
}

// Every YAML but the one whose deepspeed_config_file is relative to its project's root, which
// RelativeToWhereItRuns covers.
std::vector<std::string> self_contained_yamls() {
  std::vector<std::string> names = fixtures("accelerate", ".yaml");
  std::erase(names, "hiyouga_llama_factory_ds_multi_nodes.yaml");
  return names;
}

INSTANTIATE_TEST_SUITE_P(Files, RealAccelerateConfig, ::testing::ValuesIn(self_contained_yamls()),
                         test_name);

TEST(RealAccelerateConfig, TheyMapAsAccelerateMapsThem) {
  EXPECT_GE(fixtures("accelerate", ".yaml").size(), 5u);
  const Config handbook =
      load_config_file(
          testing::fixture("accelerate", "huggingface_alignment_handbook_deepspeed_zero3.yaml"))
          .config;
  EXPECT_EQ(handbook.zero.stage, 3);
  EXPECT_EQ(handbook.zero.offload_optimizer.device, OffloadDevice::cpu);
  EXPECT_EQ(handbook.zero.offload_param.device, OffloadDevice::cpu);
  EXPECT_TRUE(handbook.bf16.enabled);
  EXPECT_TRUE(handbook.checkpoint.gather_16bit_weights_on_model_save);
  const Config trl =
      load_config_file(testing::fixture("accelerate", "huggingface_trl_deepspeed_zero3.yaml"), 8)
          .config;
  EXPECT_TRUE(trl.fp16.enabled);
  EXPECT_EQ(trl.batch.train_batch_size, 8);
  // Accelerate's template points at ../deepspeed_config_templates/zero_stage1_config.json.
  LoadedConfig templated =
      load_config_file(testing::fixture("accelerate", "huggingface_accelerate_deepspeed.yaml"));
  EXPECT_EQ(templated.config.zero.stage, 1);
  EXPECT_EQ(templated.config.scheduler.type, SchedulerType::warmup_decay_lr);
}

TEST(RealAccelerateConfig, DeepSpeedFileRelativeToWhereItRuns) {
  const auto yaml = testing::fixture("accelerate", "hiyouga_llama_factory_ds_multi_nodes.yaml");
  EXPECT_THROW(load_config_file(yaml), ConfigError);  // from here the path names nothing
  const aio::testing::TempDir temp;
  const std::filesystem::path& root = temp.path();
  std::filesystem::create_directories(root / "examples/deepspeed");
  std::filesystem::copy_file(
      testing::fixture("real", "hiyouga_llama_factory_ds_z3_offload_config.json"),
      root / "examples/deepspeed/ds_z3_offload_config.json",
      std::filesystem::copy_options::overwrite_existing);
  const auto here = std::filesystem::current_path();
  std::filesystem::current_path(root);
  LoadedConfig loaded = load_config_file(yaml, 16);
  std::filesystem::current_path(here);
  EXPECT_EQ(loaded.config.zero.stage, 3);
  EXPECT_EQ(loaded.config.zero.offload_param.device, OffloadDevice::cpu);
  EXPECT_EQ(loaded.config.batch.gradient_accumulation_steps, 1);
}

}  // namespace
}  // namespace strata::engine

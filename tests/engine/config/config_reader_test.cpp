// The typed reader under the loader: number formats, "auto", aliases, did-you-mean.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/config/json_reader.h"
#include "tests/engine/config/config_test_util.h"

namespace strata::engine {
namespace {

using detail::json_to_int;
using detail::json_to_real;
using detail::nearest_key;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::text_error;

TEST(ConfigNumbers, IntegersAcceptExponentFormsAndStrings) {
  EXPECT_EQ(json_to_int(json(500000000)), 500'000'000);
  EXPECT_EQ(json_to_int(json::parse("5e8")), 500'000'000);
  EXPECT_EQ(json_to_int(json::parse("1E9")), 1'000'000'000);
  EXPECT_EQ(json_to_int(json("5e8")), 500'000'000);
  EXPECT_EQ(json_to_int(json(" 1e9 ")), 1'000'000'000);
  EXPECT_EQ(json_to_int(json("123456789012345678")), 123'456'789'012'345'678);
  EXPECT_EQ(json_to_int(json(8.0)), 8);
  EXPECT_EQ(json_to_int(json(-3)), -3);
  EXPECT_EQ(json_to_int(json(INT64_MAX)), INT64_MAX);
}

TEST(ConfigNumbers, IntegersRefuseFractionsRangeAndOtherTypes) {
  EXPECT_EQ(json_to_int(json(2.5)), std::nullopt);
  EXPECT_EQ(json_to_int(json("2.5")), std::nullopt);
  EXPECT_EQ(json_to_int(json(1e19)), std::nullopt);
  EXPECT_EQ(json_to_int(json(std::uint64_t{1} << 63)), std::nullopt);
  EXPECT_EQ(json_to_int(json("1e400")), std::nullopt);
  EXPECT_EQ(json_to_int(json("nan")), std::nullopt);
  EXPECT_EQ(json_to_int(json("0x10")), std::nullopt);
  EXPECT_EQ(json_to_int(json("")), std::nullopt);
  EXPECT_EQ(json_to_int(json(true)), std::nullopt);
  EXPECT_EQ(json_to_int(json(nullptr)), std::nullopt);
  EXPECT_EQ(json_to_int(json::array({1})), std::nullopt);
}

TEST(ConfigNumbers, RealsAcceptNumbersAndNumericStrings) {
  EXPECT_EQ(json_to_real(json(3)), 3.0);
  EXPECT_EQ(json_to_real(json("3e-5")), 3e-5);
  EXPECT_EQ(json_to_real(json("+0.5")), 0.5);
  EXPECT_EQ(json_to_real(json("inf")), std::nullopt);
  EXPECT_EQ(json_to_real(json("3e-5x")), std::nullopt);
  EXPECT_EQ(json_to_real(json(false)), std::nullopt);
}

TEST(ConfigNumbers, BooleansMustBeJsonBooleans) {
  for (const char* value : {"1", "\"true\"", "\"yes\"", "null"}) {
    std::string text =
        std::string(R"({"train_batch_size": 1, "wall_clock_breakdown": )") + value + "}";
    EXPECT_THAT(text_error(text), HasSubstr("wall_clock_breakdown: got")) << value;
  }
}

TEST(ConfigDidYouMean, NearestKeyWithinAThirdOfTheLength) {
  std::vector<std::string> keys = {"stage3_max_live_parameters", "stage3_max_reuse_distance",
                                   "max_live_parameters", "stage"};
  EXPECT_EQ(nearest_key("stage3_max_live_params", keys), "stage3_max_live_parameters");
  EXPECT_EQ(nearest_key("stag", keys), "stage");
  EXPECT_EQ(nearest_key("max_live_parameter", keys), "max_live_parameters");
  EXPECT_EQ(nearest_key("completely_different", keys), std::nullopt);
  EXPECT_EQ(detail::edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(detail::edit_distance("", "abc"), 3u);
}

TEST(ConfigDidYouMean, FarKeysListTheKnownOnes) {
  std::string message = text_error(R"({"train_batch_size": 1, "aio": {"zzzzzzzzzzzz": 1}})");
  EXPECT_THAT(message, HasSubstr("aio.zzzzzzzzzzzz: unknown key; known keys: block_size"));
  EXPECT_THAT(message, Not(HasSubstr("did you mean")));
}

TEST(ConfigDidYouMean, TopLevelTyposAreWarningsWithASuggestion) {
  LoadedConfig loaded =
      parse_config_text(R"({"train_batch_size": 1, "zero_optimisation": {"stage": 3}})");
  ASSERT_EQ(loaded.warnings.size(), 1u);
  EXPECT_THAT(loaded.warnings[0], HasSubstr("zero_optimisation: unknown top-level key"));
  EXPECT_THAT(loaded.warnings[0], HasSubstr("did you mean \"zero_optimization\""));
  EXPECT_EQ(loaded.config.zero.stage, 0);
}

TEST(ConfigAuto, AutoFollowsDModel) {
  json config = {{"train_batch_size", 1},
                 {"strata", {{"model", {{"d_model", 4096}, {"n_head", 32}}}}},
                 {"zero_optimization",
                  {{"stage", 3},
                   {"reduce_bucket_size", "auto"},
                   {"stage3_prefetch_bucket_size", "auto"},
                   {"stage3_param_persistence_threshold", "auto"}}}};
  const Config c = parse_config(config).config;
  EXPECT_EQ(c.zero.reduce_bucket_size, 4096LL * 4096);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 15'099'494);  // round(0.9 * 4096^2)
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 40'960);
}

TEST(ConfigAuto, AutoBatchKeepsAGivenAccumulation) {
  json config = {{"train_batch_size", "auto"},
                 {"train_micro_batch_size_per_gpu", "auto"},
                 {"gradient_accumulation_steps", 8}};
  const Config c = parse_config(config, 4).config;
  EXPECT_EQ(c.batch.train_micro_batch_size_per_gpu, 1);
  EXPECT_EQ(c.batch.gradient_accumulation_steps, 8);
  EXPECT_EQ(c.batch.train_batch_size, 32);
}

TEST(ConfigAuto, Bf16AutoStaysOffWhenFp16IsOn) {
  json config = {
      {"train_batch_size", 1}, {"fp16", {{"enabled", true}}}, {"bf16", {{"enabled", "auto"}}}};
  const Config c = parse_config(config).config;
  EXPECT_TRUE(c.fp16.enabled);
  EXPECT_FALSE(c.bf16.enabled);
}

TEST(ConfigAuto, AutoWhereTheTrainerFillsNothingKeepsTheDefault) {
  LoadedConfig loaded =
      parse_config_text(R"({"train_batch_size": 1, "aio": {"queue_depth": "auto"}})");
  EXPECT_EQ(loaded.config.aio.queue_depth, 8);
  EXPECT_THAT(loaded.notes, ::testing::Contains(HasSubstr("aio.queue_depth: \"auto\" -> 8")));
}

TEST(ConfigAliases, SameValueUnderBothNamesIsFine) {
  json config = {{"train_batch_size", 1},
                 {"aio", {{"thread_count", 2}, {"intra_op_parallelism", 2}}}};
  EXPECT_EQ(parse_config(config).config.aio.intra_op_parallelism, 2);
}

TEST(ConfigAliases, ConflictIsReportedOnce) {
  for (const char* text :
       {R"({"train_batch_size": 1, "aio": {"thread_count": 2, "intra_op_parallelism": 4}})",
        R"({"train_batch_size": 1, "bf16": {"enabled": true}, "bfloat16": {"enabled": false}})",
        R"({"train_batch_size": 1, "zero_optimization": {"stage": 3,
            "stage3_prefetch_bucket_size": 1, "prefetch_bucket_size": 2}})"}) {
    try {
      parse_config_text(text);
      FAIL() << text;
    } catch (const ConfigError& error) {
      EXPECT_EQ(error.problems().size(), 1u) << error.what();
    }
  }
}

TEST(ConfigAliases, ErrorsNameTheAliasTheUserWrote) {
  EXPECT_THAT(text_error(R"({"train_batch_size": 1, "aio": {"thread_count": 0}})"),
              HasSubstr("aio.thread_count: got 0"));
  EXPECT_THAT(
      text_error(R"({"train_batch_size": 1, "zero_optimization": {"max_reuse_distance": -1}})"),
      HasSubstr("zero_optimization.max_reuse_distance: got -1"));
  EXPECT_THAT(text_error(R"({"train_batch_size": 1, "bfloat16": {"enable": true}})"),
              HasSubstr("bfloat16.enable: unknown key; did you mean \"enabled\""));
}

TEST(ConfigAliases, DeprecatedCpuOffloadParam) {
  LoadedConfig loaded = parse_config(json{
      {"train_batch_size", 1},
      {"zero_optimization", {{"stage", 3}, {"cpu_offload_param", true}, {"cpu_offload", true}}}});
  EXPECT_EQ(loaded.config.zero.offload_param.device, OffloadDevice::cpu);
  EXPECT_EQ(loaded.config.zero.offload_optimizer.device, OffloadDevice::cpu);
  EXPECT_EQ(loaded.warnings.size(), 2u);
}

TEST(ConfigBatch, DeepSpeedRuleWithWorldSize) {
  auto batch = [](json config, int world) { return parse_config(config, world).config.batch; };
  BatchConfig b = batch({{"train_batch_size", 64}, {"gradient_accumulation_steps", 2}}, 4);
  EXPECT_EQ(b.train_micro_batch_size_per_gpu, 8);
  b = batch({{"train_micro_batch_size_per_gpu", 3}, {"gradient_accumulation_steps", 5}}, 2);
  EXPECT_EQ(b.train_batch_size, 30);
  b = batch({{"train_micro_batch_size_per_gpu", 3}}, 7);
  EXPECT_EQ(b.train_batch_size, 21);
  EXPECT_EQ(b.gradient_accumulation_steps, 1);
  EXPECT_THAT(text_error(R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3})", 1),
              HasSubstr("10 != 3 * 3 * 1"));
}

TEST(ConfigErrors, ReportsAllProblemsNotJustTheFirst) {
  std::string message = text_error(R"({
    "train_batch_size": 1,
    "fp16": {"loss_scale_window": 0},
    "optimizer": {"type": "AdamW", "params": {"lr": -1}},
    "zero_optimization": {"stage": "three"}
  })");
  EXPECT_THAT(message, HasSubstr("3 problems"));
  EXPECT_THAT(message, HasSubstr("fp16.loss_scale_window: got 0"));
  EXPECT_THAT(message, HasSubstr("optimizer.params.lr: got -1, expected a number >= 0"));
  EXPECT_THAT(message, HasSubstr("zero_optimization.stage: got \"three\""));
}

TEST(ConfigErrors, UnsupportedOptimizerIsOneProblemNotOnePerParam) {
  try {
    parse_config_text(R"({"train_batch_size": 1, "optimizer": {"type": "OneBitLamb",
                          "params": {"lr": 1e-3, "max_coeff": 0.3, "freeze_step": 100}}})");
    FAIL() << "loaded";
  } catch (const ConfigError& error) {
    ASSERT_EQ(error.problems().size(), 1u);
    EXPECT_THAT(error.problems()[0], HasSubstr("optimizer.type: \"OneBitLamb\""));
    EXPECT_THAT(error.problems()[0], HasSubstr("not supported by strata"));
  }
}

// The parser refuses bytes that are not UTF-8; the message shows them escaped, so that it can
// itself go into JSON (`config check --json`).
TEST(ConfigErrors, InvalidUtf8IsRefusedPrintably) {
  std::string text = "{\"train_batch_size\": 1, \"aio\": {\"q\xff\": 1}}";
  std::string message = text_error(text);
  EXPECT_THAT(message, HasSubstr("malformed JSON"));
  EXPECT_THAT(message, HasSubstr("\\xFF"));
  EXPECT_NO_THROW(nlohmann::json(message).dump());
}

TEST(ConfigErrors, DeepNestingIsRefused) {
  std::string text =
      R"({"train_batch_size": 1, "wandb": )" + std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_THAT(text_error(text), HasSubstr("nested deeper than 64 levels"));
}

}  // namespace
}  // namespace strata::engine

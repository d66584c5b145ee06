// The run's length and precision as the command line gives them (ConfigOverrides: --steps, --bf16,
// --fp16), and the "auto" schedule the HF Trainer would fill from them: total_num_steps from the
// run's steps, warmup_num_steps from TrainingArguments.get_warmup_steps(), a warning when a
// schedule falls to lr 0 before the run ends.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engine/optim/lr_schedule.h"
#include "tests/engine/config/config_test_util.h"

namespace strata::engine {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

LoadedConfig load(std::string_view text, const ConfigOverrides& overrides = {}) {
  return parse_config_text(text, "config", 1, overrides);
}

std::string error_of(std::string_view text, const ConfigOverrides& overrides = {}) {
  try {
    load(text, overrides);
  } catch (const ConfigError& error) {
    return error.what();
  }
  ADD_FAILURE() << text << " loaded, but should be refused";
  return "";
}

ConfigOverrides steps(std::int64_t train_steps) {
  ConfigOverrides overrides;
  overrides.train_steps = train_steps;
  return overrides;
}

// The HF Trainer's DeepSpeed template, every value "auto", with strata.train_steps 30.
constexpr std::string_view kAutoDecay = R"({
  "train_micro_batch_size_per_gpu": "auto",
  "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
  "scheduler": {"type": "WarmupDecayLR",
                "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                           "warmup_num_steps": "auto", "total_num_steps": "auto"}},
  "strata": {"train_steps": 30}
})";

TEST(ConfigRunLength, StepsReplaceTrainStepsAndAutoTotalFollows) {
  const LoadedConfig file = load(kAutoDecay);
  EXPECT_EQ(file.config.strata.train_steps, 30);
  EXPECT_EQ(file.config.scheduler.total_num_steps, 30);
  EXPECT_THAT(file.notes, Contains(HasSubstr("scheduler.params.total_num_steps: \"auto\" -> 30 "
                                             "(the run's steps, strata.train_steps)")));
  const LoadedConfig run = load(kAutoDecay, steps(60));
  EXPECT_EQ(run.config.strata.train_steps, 60);
  EXPECT_EQ(run.config.scheduler.total_num_steps, 60);
  EXPECT_THAT(run.notes, Contains(HasSubstr("scheduler.params.total_num_steps: \"auto\" -> 60 "
                                            "(the run's steps, from --steps)")));
  // Without strata.train_steps, --steps 3 is a 3-step schedule, not one of strata's default 200.
  const LoadedConfig bare = load(R"({"train_micro_batch_size_per_gpu": 1,
      "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": "auto"}}})",
                                 steps(3));
  EXPECT_EQ(bare.config.scheduler.total_num_steps, 3);
}

TEST(ConfigRunLength, AutoWarmupIsTheTrainersGetWarmupSteps) {
  auto warmup_of = [](std::string_view type, std::string_view strata, std::int64_t run_steps) {
    const std::string text = fmt::format(
        R"({{"train_micro_batch_size_per_gpu": 1,
             "scheduler": {{"type": "{}", "params": {{"warmup_num_steps": "auto"{}}}}},
             "strata": {{{}}}}})",
        type, type == "WarmupLR" ? "" : R"(, "total_num_steps": "auto")", strata);
    return load(text, steps(run_steps)).config.scheduler.warmup_num_steps;
  };
  for (std::string_view type : {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"}) {
    // TrainingArguments' defaults, warmup_steps 0 and warmup_ratio 0: no warm-up.
    EXPECT_EQ(warmup_of(type, "", 60), 0) << type;
    EXPECT_EQ(warmup_of(type, R"("warmup_steps": 5)", 60), 5) << type;
    EXPECT_EQ(warmup_of(type, R"("warmup_ratio": 0.1)", 60), 6) << type;  // ceil(60 x 0.1)
    EXPECT_EQ(warmup_of(type, R"("warmup_ratio": 0.15)", 7), 2) << type;  // ceil(1.05)
    // warmup_steps wins over the ratio when above 0, as in get_warmup_steps().
    EXPECT_EQ(warmup_of(type, R"("warmup_steps": 3, "warmup_ratio": 0.5)", 60), 3) << type;
    EXPECT_EQ(warmup_of(type, R"("warmup_steps": 0, "warmup_ratio": 0.5)", 60), 30) << type;
  }
  const LoadedConfig ratio = load(R"({"train_micro_batch_size_per_gpu": 1,
      "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}},
      "strata": {"warmup_ratio": 0.1}})",
                                  steps(60));
  EXPECT_THAT(ratio.notes, Contains(HasSubstr("scheduler.params.warmup_num_steps: \"auto\" -> 6 "
                                              "(strata.warmup_ratio 0.1 x 60 steps, rounded up)")));
  EXPECT_EQ(ratio.config.strata.warmup_ratio, 0.1);
  EXPECT_EQ(to_json(ratio.config)["strata"]["warmup_ratio"], 0.1);
  EXPECT_TRUE(to_json(ratio.config)["strata"]["warmup_steps"].is_null());
}

// The journey that trained at lr 0: an "auto" WarmupDecayLR run for 60 steps. Every step after the
// first two (DeepSpeed's schedules start at warmup_min_lr) trains at a positive lr, the warm-up is
// over by the third step, and the lr decays to the end instead of peaking there.
TEST(ConfigRunLength, AnAutoScheduleTrainsEveryStepAtAPositiveLr) {
  const LoadedConfig loaded = load(kAutoDecay, steps(60));
  EXPECT_THAT(loaded.warnings, IsEmpty());
  const optim::LrSchedule schedule(loaded.config.scheduler, loaded.config.optimizer);
  const double peak = loaded.config.optimizer.lr;
  EXPECT_DOUBLE_EQ(schedule.lr(2), peak);  // the third step: W = max(2, 0) = 2
  EXPECT_DOUBLE_EQ(schedule.lr(3), peak);  // the decay's first step: (60 - 2) / (60 - 2)
  for (std::int64_t applied = 2; applied < 60; ++applied) {
    EXPECT_GT(schedule.lr(applied), 0.0) << "step " << applied + 1;
    if (applied > 3) {
      EXPECT_LT(schedule.lr(applied), schedule.lr(applied - 1)) << "step " << applied + 1;
    }
  }
}

TEST(ConfigRunLength, WarmupNumStepsWrittenOutrightMustAgreeWithTheStrataKeys) {
  EXPECT_THAT(error_of(R"({"train_micro_batch_size_per_gpu": 1,
      "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 20}},
      "strata": {"warmup_steps": 10}})"),
              HasSubstr("scheduler.params.warmup_num_steps: 20 differs from 10, what "
                        "strata.warmup_steps gives; give one of them (or write \"auto\" here)"));
  EXPECT_THAT(error_of(R"({"train_micro_batch_size_per_gpu": 1,
      "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 20}},
      "strata": {"warmup_ratio": 0.5}})",
                       steps(10)),
              HasSubstr("20 differs from 5, what strata.warmup_ratio gives"));
  // Given, they fill a warmup_num_steps left out, as strata.lr fills a missing lr.
  EXPECT_EQ(load(R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {"type": "WarmupLR"},
                     "strata": {"warmup_steps": 7}})")
                .config.scheduler.warmup_num_steps,
            7);
  // Without them, a value written outright is the value.
  EXPECT_EQ(load(R"({"train_micro_batch_size_per_gpu": 1,
      "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 20}}})")
                .config.scheduler.warmup_num_steps,
            20);
  EXPECT_THAT(error_of(R"({"train_micro_batch_size_per_gpu": 1,
      "strata": {"warmup_ratio": 1.5, "warmup_steps": -1}})"),
              AllOf(HasSubstr("strata.warmup_ratio"), HasSubstr("strata.warmup_steps")));
}

// warmup_num_steps 0, written or filled, loads and builds the schedule train runs: the check and
// the run agree.
TEST(ConfigRunLength, ZeroWarmupLoadsAndTrains) {
  for (std::string_view type : {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"}) {
    const LoadedConfig loaded = load(fmt::format(
        R"({{"train_micro_batch_size_per_gpu": 1,
             "scheduler": {{"type": "{}", "params": {{"warmup_num_steps": 0{}}}}}}})",
        type, type == "WarmupLR" ? "" : R"(, "total_num_steps": 10)"));
    EXPECT_EQ(loaded.config.scheduler.warmup_num_steps, 0);
    const optim::LrSchedule schedule(loaded.config.scheduler, loaded.config.optimizer);
    EXPECT_GT(schedule.lr(3), 0.0) << type;
  }
}

TEST(ConfigRunLength, AScheduleThatFallsToZeroBeforeTheRunEndsWarns) {
  const LoadedConfig decay = load(R"({"train_micro_batch_size_per_gpu": 1,
      "scheduler": {"type": "WarmupDecayLR",
                    "params": {"total_num_steps": 30, "warmup_num_steps": 5}}})",
                                  steps(60));
  EXPECT_THAT(decay.warnings,
              Contains(AllOf(HasSubstr("scheduler: WarmupDecayLR reaches lr 0 at step 32 and "
                                       "stays there to the run's last step 60"),
                             HasSubstr("set total_num_steps to \"auto\" or 60"))));
  // Step 32 runs at last_batch_iteration 30 = total_num_steps, the first at lr 0.
  const optim::LrSchedule schedule(decay.config.scheduler, decay.config.optimizer);
  EXPECT_GT(schedule.lr(30), 0.0);
  EXPECT_EQ(schedule.lr(31), 0.0);

  const LoadedConfig cosine = load(R"({"train_micro_batch_size_per_gpu": 1,
      "scheduler": {"type": "WarmupCosineLR",
                    "params": {"total_num_steps": 20, "warmup_num_steps": 5,
                               "cos_min_ratio": 0}}})",
                                   steps(25));
  EXPECT_THAT(cosine.warnings, Contains(AllOf(HasSubstr("WarmupCosineLR reaches lr 0"),
                                              HasSubstr("or cos_min_ratio above 0"))));
  const LoadedConfig cycle = load(R"({"train_micro_batch_size_per_gpu": 1,
      "scheduler": {"type": "OneCycle",
                    "params": {"cycle_min_lr": 0, "cycle_max_lr": 0.01,
                               "cycle_first_step_size": 4}}})",
                                  steps(20));
  EXPECT_THAT(cycle.warnings, Contains(AllOf(HasSubstr("OneCycle reaches lr 0 at step 9"),
                                             HasSubstr("set cycle_min_lr above 0"))));

  // At the run's own length, or with a floor above 0, nothing to say.
  for (std::string_view text :
       {R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {"type": "WarmupDecayLR",
            "params": {"total_num_steps": "auto", "warmup_num_steps": 5}}})",
        R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {"type": "WarmupDecayLR",
            "params": {"total_num_steps": 30, "warmup_min_lr": 1e-5}}})",
        R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {"type": "WarmupCosineLR",
            "params": {"total_num_steps": "auto", "warmup_num_steps": 5, "cos_min_ratio": 0}}})",
        R"({"train_micro_batch_size_per_gpu": 1, "scheduler": {"type": "WarmupCosineLR",
            "params": {"total_num_steps": 20, "warmup_num_steps": 5}}})"}) {
    EXPECT_THAT(load(text, steps(60)).warnings, Not(Contains(HasSubstr("reaches lr 0")))) << text;
  }
}

// The start-up prints one line per note; a note about an "auto" fill must stay one short line.
TEST(ConfigRunLength, EachAutoNoteIsOneShortLine) {
  ConfigOverrides overrides = steps(60);
  overrides.bf16 = true;
  const LoadedConfig loaded = testing::load_good("hf_zero3_auto.json");
  const LoadedConfig run =
      load_config_file(testing::fixture("good", "hf_zero3_auto.json"), 8, overrides);
  EXPECT_FALSE(loaded.notes.empty());
  for (const LoadedConfig* config : {&loaded, &run}) {
    for (const std::string& note : config->notes) {
      if (note.find("\"auto\" ->") == std::string::npos) continue;
      EXPECT_EQ(note.find('\n'), std::string::npos) << note;
      EXPECT_LE(note.size(), 120u) << note;
    }
  }
}

TEST(ConfigOverridesPrecision, FlagsFillEnabledAsTheTrainersFillMatch) {
  ConfigOverrides bf16;
  bf16.bf16 = true;
  const LoadedConfig filled = load(R"({"train_micro_batch_size_per_gpu": 1,
      "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}})",
                                   bf16);
  EXPECT_TRUE(filled.config.bf16.enabled);
  EXPECT_FALSE(filled.config.fp16.enabled);
  EXPECT_THAT(filled.notes, Contains(HasSubstr("bf16.enabled: \"auto\" -> true (from --bf16)")));
  // Absent, the flag asks for it; written true, they agree.
  EXPECT_TRUE(load(R"({"train_micro_batch_size_per_gpu": 1})", bf16).config.bf16.enabled);
  EXPECT_TRUE(load(R"({"train_micro_batch_size_per_gpu": 1, "bfloat16": {"enabled": true}})", bf16)
                  .config.bf16.enabled);
  ConfigOverrides fp16;
  fp16.fp16 = true;
  const Config fp16_config = load(R"({"train_micro_batch_size_per_gpu": 1,
      "fp16": {"enabled": "auto", "loss_scale": 0}, "bf16": {"enabled": "auto"}})",
                                  fp16)
                                 .config;
  EXPECT_TRUE(fp16_config.fp16.enabled);
  EXPECT_FALSE(fp16_config.bf16.enabled);
  // Without a flag "auto" stays fp32.
  EXPECT_FALSE(load(R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": "auto"}})")
                   .config.bf16.enabled);
}

TEST(ConfigOverridesPrecision, AFlagAgainstTheFileIsAnErrorNamingBoth) {
  ConfigOverrides bf16;
  bf16.bf16 = true;
  EXPECT_THAT(
      error_of(R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": false}})", bf16),
      HasSubstr("bf16.enabled: false, but --bf16 asks for it; remove --bf16, or set "
                "enabled to true or \"auto\""));
  EXPECT_THAT(
      error_of(R"({"train_micro_batch_size_per_gpu": 1, "bfloat16": {"enabled": false}})", bf16),
      HasSubstr("bfloat16.enabled: false, but --bf16 asks for it"));
  ConfigOverrides fp16;
  fp16.fp16 = true;
  EXPECT_THAT(
      error_of(R"({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": false}})", fp16),
      HasSubstr("fp16.enabled: false, but --fp16 asks for it"));
  // The other precision enabled outright: both would be on, which DeepSpeed refuses too.
  EXPECT_THAT(error_of(R"({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": true}})", bf16),
              HasSubstr("fp16.enabled is true, but --bf16 asks for bf16"));
  EXPECT_THAT(error_of(R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}})", fp16),
              HasSubstr("bf16.enabled is true, but --fp16 asks for fp16"));
  ConfigOverrides both;
  both.bf16 = true;
  both.fp16 = true;
  EXPECT_THAT(error_of(R"({"train_micro_batch_size_per_gpu": 1})", both),
              HasSubstr("--bf16 and --fp16: both given"));
}

}  // namespace
}  // namespace strata::engine

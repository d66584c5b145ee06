// `strata train`'s run as a user starts and stops it: the run's length is one number that
// --steps, strata.train_steps, an "auto" schedule and a resumed run share; a resume that has
// nothing left to train, names a path that holds no checkpoint or a checkpoint of another model
// says so before the engine is built; the loss curve continues across a resume; the step line
// carries the elapsed time, what is left, the gradient norm and the peak memory at least every
// 5% of the run, and the same bytes in every run of one job; and what the config left open is
// said in one line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/tools/run_strata.h"
#include "tests/tools/spawn_strata.h"

namespace strata::tools::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// The tiny model of train_command_test.cpp (L1 H1 C16 T8 V256) with a schedule whose length and
// warm-up are "auto", as the HF Trainer's DeepSpeed templates write them.
struct RunConfig {
  std::int64_t train_steps = 30;
  std::int64_t steps_per_print = 1;
  std::string precision = "";  // e.g. R"("bf16": {"enabled": "auto"},)"
  int d_model = 16;

  std::string json() const {
    return fmt::format(R"({{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": "auto",
  "train_batch_size": "auto",
  "steps_per_print": {},
  {}
  "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-3}}}},
  "scheduler": {{"type": "WarmupDecayLR", "params": {{"total_num_steps": "auto",
    "warmup_num_steps": "auto", "warmup_max_lr": "auto", "warmup_min_lr": "auto"}}}},
  "zero_optimization": {{"stage": 0}},
  "strata": {{
    "model": {{"n_layer": 1, "n_head": 1, "d_model": {}, "seq_len": 8, "vocab": 256}},
    "train_steps": {}, "seed": 7, "job_name": "train-run-test"
  }}
}})",
                       steps_per_print, precision, d_model, train_steps);
  }
};

std::vector<json> metrics_lines(const fs::path& path) {
  std::vector<json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    lines.push_back(json::parse(line));
  return lines;
}

std::vector<std::string> rows_of(const fs::path& table) {
  std::vector<std::string> rows;
  std::ifstream in(table);
  for (std::string row; std::getline(in, row);)
    if (!row.starts_with("#")) rows.push_back(row.substr(0, row.find('\t')));
  return rows;
}

class TrainRun : public ::testing::Test {
 protected:
  void write(const RunConfig& config) { config_ = dir_.write("config.json", config.json()); }

  RunResult train(const std::vector<std::string>& more) const {
    std::vector<std::string> arguments = {"train", "--config", config_.string(), "--out",
                                          out_.string()};
    arguments.insert(arguments.end(), more.begin(), more.end());
    return run_strata(arguments);
  }

  TempDir dir_;
  fs::path config_;
  fs::path out_ = dir_.path() / "out";
  fs::path save_ = dir_.path() / "ckpt";
  fs::path metrics_ = dir_.path() / "metrics.jsonl";
};

// --steps is the run's length: the "auto" schedule spans it (not strata.train_steps), so it
// decays within the run and is still above its floor at the step before the last.
TEST_F(TrainRun, StepsSetsTheLengthAnAutoScheduleSpans) {
  write(RunConfig{});
  RunResult result = train({"--steps", "6", "--metrics", metrics_.string()});
  ASSERT_EQ(result.exit_status, 0) << result.err;
  EXPECT_THAT(result.err, HasSubstr("scheduler.params.total_num_steps 6"));
  EXPECT_THAT(result.out, HasSubstr("6 steps"));
  const std::vector<json> lines = metrics_lines(metrics_);
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_LT(lines[5]["lr"].get<double>(), lines[3]["lr"].get<double>());
  EXPECT_GT(lines[4]["lr"].get<double>(), 0);
}

// Without --steps, a resumed run keeps the length of the run that saved it, and its schedule
// with it: its steps are the uninterrupted run's.
TEST_F(TrainRun, AResumedRunKeepsTheLengthOfTheRunThatSavedIt) {
  write(RunConfig{});
  const fs::path whole = dir_.path() / "whole.jsonl";
  ASSERT_EQ(train({"--steps", "6", "--metrics", whole.string()}).exit_status, 0);
  RunResult first = train({"--steps", "6", "--save-dir", save_.string(), "--save-every", "3",
                           "--metrics", metrics_.string()});
  ASSERT_EQ(first.exit_status, 0) << first.err;
  RunResult resumed =
      train({"--resume", (save_ / "global_step3").string(), "--metrics", metrics_.string()});
  ASSERT_EQ(resumed.exit_status, 0) << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr("trained 3 steps"));
  const std::vector<json> expected = metrics_lines(whole);
  const std::vector<json> lines = metrics_lines(metrics_);
  ASSERT_EQ(lines.size(), 9u);  // 6 of the first run, then steps 4 to 6 again
  for (std::size_t step = 4; step <= 6; ++step) {
    EXPECT_EQ(lines[step + 2]["lr"], expected[step - 1]["lr"]) << "step " << step;
    EXPECT_EQ(lines[step + 2]["loss"], expected[step - 1]["loss"]) << "step " << step;
  }
}

TEST_F(TrainRun, ResumingAtTheLastStepSaysTheCheckpointIsAlreadyThere) {
  write(RunConfig{});
  ASSERT_EQ(train({"--steps", "2", "--save-dir", save_.string()}).exit_status, 0);
  RunResult again = train({"--resume", save_.string()});
  EXPECT_EQ(again.exit_status, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr(fmt::format("nothing to train: {} is already at step 2",
                                               (save_ / "global_step2").string())));
  EXPECT_THAT(again.out, HasSubstr("pass --steps 3 or more"));
  EXPECT_THAT(again.out, Not(HasSubstr("trained 0 steps")));
  EXPECT_THAT(again.err, Not(HasSubstr("engine ready")));
}

// The loss curve of a resumed run continues the one its first part drew.
TEST_F(TrainRun, TheLossCurveContinuesAcrossAResume) {
  write(RunConfig{});
  ASSERT_EQ(train({"--steps", "3", "--save-dir", save_.string()}).exit_status, 0);
  RunResult resumed = train({"--steps", "5", "--resume", save_.string()});
  ASSERT_EQ(resumed.exit_status, 0) << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr("trained 2 steps"));
  EXPECT_EQ(rows_of(out_ / "loss.tsv"), (std::vector<std::string>{"1", "2", "3", "4", "5"}));
}

TEST_F(TrainRun, AResumePathThatHoldsNoCheckpointIsRefusedBeforeTheEngineIsBuilt) {
  write(RunConfig{});
  RunResult result = train({"--resume", (dir_.path() / "no-such-save").string()});
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr("no checkpoint at " + (dir_.path() / "no-such-save").string()));
  EXPECT_THAT(result.err, HasSubstr("fix: give a save directory"));
  EXPECT_THAT(result.out, Not(HasSubstr("strata train")));
  EXPECT_THAT(result.err, Not(HasSubstr("engine ready")));
}

TEST_F(TrainRun, ACheckpointOfAnotherModelIsRefusedBeforeTheEngineNamingItsModel) {
  write(RunConfig{});
  ASSERT_EQ(train({"--steps", "2", "--save-dir", save_.string()}).exit_status, 0);
  RunConfig wider;
  wider.d_model = 32;
  write(wider);
  RunResult result = train({"--steps", "4", "--resume", save_.string()});
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr("in the checkpoint but"));
  EXPECT_THAT(result.err, HasSubstr("the checkpoint holds strata's GPT (strata.model n_layer 1, "
                                    "n_head 1, d_model 16, seq_len 8, vocab 256;"));
  EXPECT_THAT(result.err, Not(HasSubstr("engine ready")));
}

TEST_F(TrainRun, SaveEveryWithoutASaveDirectoryIsRefused) {
  write(RunConfig{});
  RunResult result = train({"--steps", "2", "--save-every", "1"});
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr("--save-every 1 without a save directory: nothing would be "
                                    "saved"));
  EXPECT_THAT(result.err, HasSubstr("fix: add --save-dir DIR"));
}

// A signal that stops a run without a save directory says that nothing was saved.
TEST_F(TrainRun, AStopWithoutASaveDirectorySaysNothingWasSaved) {
  RunConfig config;
  config.steps_per_print = 1000;
  write(config);
  SpawnedStrata child(
      {"train", "--config", config_.string(), "--out", out_.string(), "--steps", "100000"});
  ASSERT_TRUE(child.wait_for_output("step     1/100000", std::chrono::seconds(120)))
      << child.out() << child.err();
  child.signal(SIGTERM);
  RunResult result = child.wait(std::chrono::seconds(120));
  EXPECT_EQ(result.exit_status, 143) << result.err;
  EXPECT_THAT(result.err, HasSubstr("nothing was saved: the run has no save directory"));
}

// A steps_per_print far past the run still prints a line at least every 5% of it, each with
// the elapsed time, what is left, the gradient norm and the peak memory.
TEST_F(TrainRun, ALongStepsPerPrintStillPrintsEveryTwentiethOfTheRun) {
  RunConfig config;
  config.steps_per_print = 2000;
  write(config);
  RunResult result = train({"--steps", "40"});
  ASSERT_EQ(result.exit_status, 0) << result.err;
  for (int step : {1, 2, 4, 6, 20, 38, 40})
    EXPECT_THAT(result.out, HasSubstr(fmt::format("step {:5d}/40 |", step))) << step;
  EXPECT_THAT(result.out, Not(HasSubstr("step     3/40 |")));
  std::smatch match;
  static const std::regex line(
      "step +2/40 \\| loss [0-9.]+ \\| lr [0-9.e+-]+ \\| norm [0-9.e+-]+ \\| +[0-9]+ ms \\| "
      "+[0-9]+ "
      "tok/s \\| [0-9]+:[0-9]{2} elapsed, [0-9]+:[0-9]{2} left \\| peak gpu [0-9.]+ [KMG]?i?B cpu "
      "[0-9.]+ [KMG]?i?B \\|");
  EXPECT_TRUE(std::regex_search(result.out, match, line)) << result.out;
}

// What "auto" became is one line by default; --verbose gives every note.
TEST_F(TrainRun, AutoFillsAreOneLineUnlessVerbose) {
  write(RunConfig{});
  RunResult quiet = train({"--steps", "1"});
  ASSERT_EQ(quiet.exit_status, 0) << quiet.err;
  EXPECT_THAT(quiet.err, HasSubstr("\"auto\" became: "));
  EXPECT_THAT(quiet.err, Not(HasSubstr("\"auto\" -> ")));
  RunResult verbose = train({"--steps", "1", "--verbose"});
  ASSERT_EQ(verbose.exit_status, 0) << verbose.err;
  EXPECT_THAT(verbose.err, HasSubstr("scheduler.params.total_num_steps: \"auto\" -> 1"));
}

// --bf16 is the HF Trainer's: an "auto" bf16.enabled trains in bf16.
TEST_F(TrainRun, Bf16FlagTurnsOnAnAutoBf16) {
  RunConfig config;
  config.precision = R"("bf16": {"enabled": "auto"},)";
  write(config);
  RunResult plain = train({"--steps", "1"});
  ASSERT_EQ(plain.exit_status, 0) << plain.err;
  EXPECT_THAT(plain.out, HasSubstr("precision  fp32"));
  RunResult bf16 = train({"--steps", "1", "--bf16"});
  ASSERT_EQ(bf16.exit_status, 0) << bf16.err;
  EXPECT_THAT(bf16.out, HasSubstr("precision  bf16"));
  RunResult both = train({"--steps", "1", "--bf16", "--fp16"});
  EXPECT_EQ(both.exit_status, 2) << both.err;
}

TEST_F(TrainRun, AConfigWithoutModelOrDataSaysItTrainsTheBuiltInDemo) {
  config_ = dir_.write("config.json", R"({"train_micro_batch_size_per_gpu": 1,
    "strata": {"train_steps": 1, "device_memory_budget": "1GiB"}})");
  RunResult result = train({"--steps", "1", "--eval-every", "1000"});
  ASSERT_EQ(result.exit_status, 0) << result.err;
  EXPECT_THAT(result.err, HasSubstr("the config names no model and no data (strata.model, "
                                    "strata.data): training strata's built-in GPT on the "
                                    "built-in synthetic corpus"));
}

// The bytes each step line and metrics line report are the job's, not the timing's: two runs of
// one job with its optimizer on NVMe, stepped beside backward and the next forward, print the
// same bytes in every step.
TEST_F(TrainRun, TwoRunsOfOneJobPrintTheSameBytesInEveryStep) {
  const fs::path swap = dir_.path() / "swap";
  const std::string offload =
      fmt::format(R"({{"device": "nvme", "nvme_path": "{}", "pin_memory": false}})", swap.string());
  // max_in_cpu 0: every step reads the parameters from NVMe too.
  const std::string params = fmt::format(
      R"({{"device": "nvme", "nvme_path": "{}", "pin_memory": false, "max_in_cpu": 0}})",
      swap.string());
  config_ = dir_.write("config.json", fmt::format(R"({{
  "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1, "gradient_clipping": 0,
  "bf16": {{"enabled": true, "check_grad_overflow": false}},
  "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-3}}}},
  "zero_optimization": {{"stage": 3, "sub_group_size": 2048,
    "stage3_param_persistence_threshold": 0, "offload_param": {}, "offload_optimizer": {}}},
  "strata": {{"model": {{"n_layer": 2, "n_head": 1, "d_model": 32, "seq_len": 8, "vocab": 256}},
    "overlap_optimizer": true, "seed": 7, "job_name": "same-bytes"}}
}})",
                                                  params, offload));
  // The traffic part of each step line: "h2d ... d2h ... nvme r/w .../...".
  const auto traffic = [](const std::string& out) {
    std::vector<std::string> parts;
    const std::regex part("h2d [^|]* nvme r/w \\S+");
    for (auto it = std::sregex_iterator(out.begin(), out.end(), part); it != std::sregex_iterator();
         ++it)
      parts.push_back(it->str());
    return parts;
  };
  const fs::path second_metrics = dir_.path() / "second.jsonl";
  RunResult first = train({"--steps", "4", "--metrics", metrics_.string()});
  ASSERT_EQ(first.exit_status, 0) << first.err;
  RunResult second = train({"--steps", "4", "--metrics", second_metrics.string()});
  ASSERT_EQ(second.exit_status, 0) << second.err;
  EXPECT_EQ(traffic(first.out), traffic(second.out));
  EXPECT_EQ(traffic(first.out).size(), 4u) << first.out;
  const std::vector<json> a = metrics_lines(metrics_);
  const std::vector<json> b = metrics_lines(second_metrics);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    for (const char* key : {"bytes_h2d", "bytes_d2h", "bytes_nvme_read", "bytes_nvme_write"})
      EXPECT_EQ(a[i][key], b[i][key]) << key << " of step " << i + 1;
    EXPECT_GT(a[i]["bytes_nvme_read"].get<std::int64_t>(), 0) << "step " << i + 1;
  }
}

TEST_F(TrainRun, HelpNamesEveryModelFamily) {
  RunResult help = run_strata({"train", "--help"});
  ASSERT_EQ(help.exit_status, 0);
  EXPECT_THAT(help.out, Not(HasSubstr("Train a GPT")));
  EXPECT_THAT(help.out, HasSubstr("Hugging Face GPT-2 or Llama-family model"));
  EXPECT_THAT(help.out, HasSubstr("--bf16"));
}

}  // namespace
}  // namespace strata::tools::testing

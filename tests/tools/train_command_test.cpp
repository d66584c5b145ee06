// `strata train`, run as a user runs it: every refusal of a bad data path or model shape names the
// key at fault and the fix, and Ctrl-C stops the run between steps with a summary and the curves.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/tools/run_strata.h"
#include "tests/tools/spawn_strata.h"

namespace strata::tools::testing {
namespace {

using ::testing::HasSubstr;

// A model small enough that a step takes well under a millisecond: L1 H1 C16 T8 V256.
struct TinyConfig {
  int n_head = 1;
  int d_model = 16;
  int seq_len = 8;
  int vocab = 256;
  std::int64_t steps = 1;
  std::int64_t steps_per_print = 1;
  std::string data_path;  // "" trains on the built-in corpus

  std::string json() const {
    std::string data =
        data_path.empty() ? "" : fmt::format(R"(, "data": {{"path": "{}"}})", data_path);
    return fmt::format(R"({{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 1,
  "steps_per_print": {},
  "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-3}}}},
  "zero_optimization": {{"stage": 0}},
  "strata": {{
    "model": {{"n_layer": 1, "n_head": {}, "d_model": {}, "seq_len": {}, "vocab": {}}},
    "train_steps": {}, "seed": 7{}
  }}
}})",
                       steps_per_print, n_head, d_model, seq_len, vocab, steps, data);
  }
};

RunResult train(const TempDir& dir, const TinyConfig& config) {
  std::filesystem::path file = dir.write("config.json", config.json());
  return run_strata({"train", "--config", file.string(), "--out", (dir.path() / "out").string()});
}

TEST(TrainCommand, TinyConfigTrainsOneStep) {
  TempDir dir;
  RunResult result = train(dir, TinyConfig{});
  ASSERT_EQ(result.exit_status, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("trained 1 steps"));
  // 6 x 7536 parameters + 12 x L1 x C16 x T8 for attention = 46752 FLOP per token.
  EXPECT_THAT(result.out, HasSubstr("GFLOP/s achieved (4.68e+04 FLOP per token)"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "out" / "loss.tsv"));
}

TEST(TrainCommand, MissingDataFileNamesTheKeyAndTheFix) {
  TempDir dir;
  TinyConfig config;
  config.data_path = (dir.path() / "no-such-corpus.txt").string();
  RunResult result = train(dir, config);
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr("strata.data.path"));
  EXPECT_THAT(result.err, HasSubstr("no-such-corpus.txt does not exist"));
  EXPECT_THAT(result.err, HasSubstr("fix: set \"strata\": {\"data\": {\"path\": ...}}"));
}

TEST(TrainCommand, DataPathThatIsADirectoryIsRefused) {
  TempDir dir;
  std::filesystem::create_directory(dir.path() / "corpus");
  TinyConfig config;
  config.data_path = (dir.path() / "corpus").string();
  RunResult result = train(dir, config);
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr("strata.data.path"));
  EXPECT_THAT(result.err, HasSubstr("not a regular file"));
  EXPECT_THAT(result.err, HasSubstr("fix:"));
}

TEST(TrainCommand, EmptyDataFileIsRefused) {
  TempDir dir;
  TinyConfig config;
  config.data_path = dir.write("empty.txt", "").string();
  RunResult result = train(dir, config);
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr("strata.data.path"));
  EXPECT_THAT(result.err, HasSubstr("empty.txt is empty"));
  EXPECT_THAT(result.err, HasSubstr("fix:"));
}

TEST(TrainCommand, SeqLenOverTheCorpusNamesTheLongestThatFits) {
  TempDir dir;
  TinyConfig config;
  // 40 bytes: 36 train and 4 validation tokens (validation_fraction 0.1); a window of seq_len 8
  // needs 9 in each split, and the validation split holds 3 inputs and a target.
  config.data_path = dir.write("short.txt", std::string(40, 'a')).string();
  RunResult result = train(dir, config);
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr("strata.model.seq_len 8 is too long for the data in"));
  EXPECT_THAT(result.err, HasSubstr("the training split has 36 and the validation split 4"));
  EXPECT_THAT(result.err, HasSubstr("fix: set \"strata\": {\"model\": {\"seq_len\": 3}} or less"));
}

TEST(TrainCommand, HeadsNotDividingDModelAreRefused) {
  TempDir dir;
  TinyConfig config;
  config.n_head = 3;
  RunResult result = train(dir, config);
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr("strata.model.d_model"));
  EXPECT_THAT(result.err, HasSubstr("16 is not a multiple of n_head 3"));
  EXPECT_THAT(result.err, HasSubstr("fix:"));
}

TEST(TrainCommand, VocabSmallerThanTheByteTokenizerIsRefused) {
  TempDir dir;
  TinyConfig config;
  config.vocab = 128;
  RunResult result = train(dir, config);
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_THAT(result.err,
              HasSubstr("strata.model.vocab 128 is smaller than the byte tokenizer's 256 tokens"));
  EXPECT_THAT(result.err, HasSubstr("fix: set \"strata\": {\"model\": {\"vocab\": 256}} or more"));
}

// Ctrl-C between steps: the run stops, prints its summary, draws its curves and exits 130, as a
// shell expects of a program stopped by SIGINT.
TEST(TrainCommand, InterruptStopsBetweenStepsWithSummaryAndCurves) {
  TempDir dir;
  TinyConfig config;
  config.steps = 100000;
  config.steps_per_print = 100;
  std::filesystem::path file = dir.write("config.json", config.json());
  std::filesystem::path out = dir.path() / "out";
  SpawnedStrata child({"train", "--config", file.string(), "--out", out.string()});
  // Step 1's line is always printed; the handler is in place before the first step runs.
  ASSERT_TRUE(child.wait_for_output("step     1/100000", std::chrono::seconds(120)))
      << "stdout:\n"
      << child.out() << "\nstderr:\n"
      << child.err();
  child.interrupt();
  RunResult result = child.wait(std::chrono::seconds(120));
  EXPECT_EQ(result.exit_status, 130) << result.err;
  std::smatch match;
  std::regex summary("stopped by SIGINT after ([0-9]+) steps");
  ASSERT_TRUE(std::regex_search(result.out, match, summary)) << result.out;
  std::int64_t done = std::stoll(match[1].str());
  EXPECT_GE(done, 1);
  EXPECT_LT(done, config.steps);
  // One line per step taken, after the header.
  std::ifstream table(out / "loss.tsv");
  std::int64_t lines = 0;
  for (std::string line; std::getline(table, line);)
    ++lines;
  EXPECT_EQ(lines, done + 1);
  if (result.err.find("gnuplot failed or is missing") == std::string::npos) {
    EXPECT_TRUE(std::filesystem::exists(out / "loss.png")) << result.out << result.err;
    EXPECT_THAT(result.out, HasSubstr("loss curves: " + (out / "loss.png").string()));
  }
}

}  // namespace
}  // namespace strata::tools::testing

// `strata train`, run as a user runs it: every refusal of a bad data path or model shape names the
// key at fault and the fix, and Ctrl-C stops the run between steps with a summary and the curves.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
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

// --timeline: one step's spans on every lane, each stream op labelled with the module that
// enqueued it, drawn as a PNG (when gnuplot is there) beside the table.
TEST(TrainCommand, TimelineRecordsEveryLaneOfAnOffloadedStep) {
  TempDir dir;
  const std::string swap = dir.path().string();
  std::filesystem::path file = dir.write("config.json", fmt::format(R"({{
  "train_micro_batch_size_per_gpu": 2,
  "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-3}}}},
  "bf16": {{"enabled": true}},
  "zero_optimization": {{"stage": 3, "sub_group_size": 4096,
    "offload_param": {{"device": "nvme", "nvme_path": "{}", "pin_memory": false}},
    "offload_optimizer": {{"device": "nvme", "nvme_path": "{}", "pin_memory": false}}}},
  "strata": {{"model": {{"n_layer": 2, "n_head": 2, "d_model": 32, "seq_len": 16, "vocab": 256}},
              "train_steps": 3, "seed": 7}}
}})",
                                                                    swap, swap));
  const std::filesystem::path png = dir.path() / "plots" / "timeline.png";  // made when missing
  RunResult result = run_strata({"train", "--config", file.string(), "--out",
                                 (dir.path() / "out").string(), "--timeline", png.string()});
  ASSERT_EQ(result.exit_status, 0) << result.err;
  std::ifstream table(dir.path() / "plots" / "timeline.tsv");
  ASSERT_TRUE(table) << result.out << result.err;
  std::set<std::string> lanes;
  bool forward_task = false;
  bool backward_task = false;
  int spans = 0;
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    std::vector<std::string> fields;
    for (std::size_t at = 0;;) {
      const std::size_t tab = line.find('\t', at);
      fields.push_back(line.substr(at, tab - at));
      if (tab == std::string::npos) break;
      at = tab + 1;
    }
    ASSERT_EQ(fields.size(), 6u) << line;
    EXPECT_LE(std::stod(fields[2]), std::stod(fields[3])) << line;
    lanes.insert(fields[4]);
    if (fields[4] == "compute" && fields[5].starts_with("task forward h.")) forward_task = true;
    if (fields[4] == "compute" && fields[5].starts_with("task backward h.")) backward_task = true;
    ++spans;
  }
  EXPECT_GT(spans, 100);
  // "gradients": the reducer's CPU queue landing the gradients, beside the compute stream.
  for (const char* lane :
       {"host", "compute", "h2d", "d2h", "gradients", "optimizer", "nvme read", "nvme write"})
    EXPECT_TRUE(lanes.contains(lane)) << lane;
  EXPECT_TRUE(forward_task);
  EXPECT_TRUE(backward_task);
  if (result.err.find("gnuplot failed or is missing") == std::string::npos) {
    EXPECT_TRUE(std::filesystem::exists(png)) << result.out << result.err;
    EXPECT_THAT(result.out, HasSubstr("timeline of step 2: " + png.string()));
  }
}

TEST(TrainCommand, ATimelineFolderThatCannotBeMadeIsRefusedBeforeAnythingStarts) {
  TempDir dir;
  std::filesystem::path file = dir.write("config.json", TinyConfig{}.json());
  // Under a file, not a folder: no user can make it.
  const std::filesystem::path png = file / "plots" / "timeline.png";
  RunResult result = run_strata({"train", "--config", file.string(), "--out",
                                 (dir.path() / "out").string(), "--timeline", png.string()});
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_THAT(result.err, HasSubstr("its folder " + (file / "plots").string() + " cannot be made"));
  EXPECT_THAT(result.err, HasSubstr("give --timeline a path in a folder you can write"));
  EXPECT_THAT(result.out, ::testing::Not(HasSubstr("trained")));
}

TEST(TrainCommand, TimelineStepPastTheRunSaysSo) {
  TempDir dir;
  const std::filesystem::path png = dir.path() / "timeline.png";
  std::filesystem::path file = dir.write("config.json", TinyConfig{}.json());
  RunResult result =
      run_strata({"train", "--config", file.string(), "--out", (dir.path() / "out").string(),
                  "--timeline", png.string(), "--timeline-step", "5"});
  ASSERT_EQ(result.exit_status, 0) << result.err;
  EXPECT_THAT(result.err, HasSubstr("--timeline-step 5 is not a step of this run (steps 1 to 1)"));
  EXPECT_FALSE(std::filesystem::exists(png));
}

}  // namespace
}  // namespace strata::tools::testing

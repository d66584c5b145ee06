// The loss curve and the timeline are drawn by gnuplot scripts written beside their tables, which
// name both the table and the PNG by their names alone: a folder copied off the machine that ran
// strata (a GPU machine without gnuplot; scripts/gpu_check.sh plot) redraws its PNGs as it is.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/tools/run_strata.h"

namespace strata::tools::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(PlotRedraw, ACopiedFolderRedrawsItsLossCurveAndTimeline) {
  TempDir dir;
  const fs::path file = dir.write("config.json", R"({
  "train_micro_batch_size_per_gpu": 2,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "strata": {"model": {"n_layer": 1, "n_head": 2, "d_model": 16, "seq_len": 8, "vocab": 256},
             "train_steps": 2, "seed": 7}
})");
  const fs::path ran = dir.path() / "ran";
  const RunResult result =
      run_strata({"train", "--config", file.string(), "--out", (ran / "out").string(), "--timeline",
                  (ran / "plots" / "timeline.png").string()});
  ASSERT_EQ(result.exit_status, 0) << result.err;

  const fs::path copied = dir.path() / "copied";
  fs::create_directories(copied);
  for (const char* name :
       {"out/loss.tsv", "out/loss.gp", "plots/timeline.tsv", "plots/timeline.gp"}) {
    fs::create_directories((copied / name).parent_path());
    fs::copy_file(ran / name, copied / name);
  }
  fs::remove_all(ran);
  for (const char* script : {"out/loss.gp", "plots/timeline.gp"}) {
    EXPECT_THAT(read_text(copied / script), Not(HasSubstr(dir.path().string()))) << script;
  }

  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "gnuplot is not installed: the scripts were checked, not run";
  }
  for (const char* script : {"out/loss.gp", "plots/timeline.gp"}) {
    const fs::path path = copied / script;
    const std::string command = fmt::format("cd '{}' && gnuplot '{}'", path.parent_path().string(),
                                            path.filename().string());
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }
  EXPECT_GT(fs::file_size(copied / "out" / "loss.png"), 0u);
  EXPECT_GT(fs::file_size(copied / "plots" / "timeline.png"), 0u);
}

}  // namespace
}  // namespace strata::tools::testing

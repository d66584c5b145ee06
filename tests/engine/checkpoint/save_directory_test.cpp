// The save directory's protocol (engine/checkpoint/save_directory.h): a checkpoint appears whole
// under its tag, `latest` follows it, pruning keeps the newest and never the latest, and what an
// interrupted save or prune left is swept by the next save.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/save_directory.h"
#include "tests/aio/aio_test_support.h"

namespace strata::engine::checkpoint {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class SaveDirectory : public ::testing::Test {
 protected:
  // A complete checkpoint of `step` under tag global_step<step>, published.
  void save(std::int64_t step) {
    const std::string tag = "global_step" + std::to_string(step);
    begin_save(dir_, tag);
    Manifest manifest;
    manifest.tag = tag;
    manifest.step = step;
    write_manifest(partial_directory(dir_, tag), manifest);
    publish(dir_, tag);
  }

  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir_))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  aio::testing::TempDir temp_;
  const fs::path dir_ = temp_.path() / "ckpt";
};

TEST_F(SaveDirectory, LatestFollowsEachPublishedCheckpoint) {
  EXPECT_FALSE(latest_tag(dir_ / "nothing").has_value());
  save(1);
  EXPECT_EQ(latest_tag(dir_), "global_step1");
  save(2);
  EXPECT_EQ(latest_tag(dir_), "global_step2");
  EXPECT_EQ(resolve_checkpoint(dir_), dir_ / "global_step2");
  EXPECT_EQ(resolve_checkpoint(dir_ / "global_step1"), dir_ / "global_step1");
  EXPECT_THAT(entries(), ElementsAre("global_step1", "global_step2", "latest"));
}

TEST_F(SaveDirectory, PruningKeepsTheNewestAndLeavesNothingBehind) {
  for (int step = 1; step <= 4; ++step)
    save(step);
  EXPECT_EQ(prune(dir_, 2), 2);
  EXPECT_THAT(entries(), ElementsAre("global_step3", "global_step4", "latest"));
  EXPECT_EQ(prune(dir_, 0), 0);  // 0 keeps all
}

TEST_F(SaveDirectory, PruningNeverRemovesTheLatest) {
  save(5);
  save(3);  // an older step saved last: latest names it
  EXPECT_EQ(prune(dir_, 1), 0);
  EXPECT_THAT(entries(), ElementsAre("global_step3", "global_step5", "latest"));
}

// A kill part way through a save or a prune leaves a partial or a pruning directory; the next
// save removes both kinds, whatever their tags.
TEST_F(SaveDirectory, TheNextSaveSweepsWhatAnInterruptedOneLeft) {
  save(1);
  fs::create_directories(dir_ / ".global_step7.partial");
  std::ofstream(dir_ / ".global_step7.partial" / "master.rank00000.safetensors") << "half";
  fs::create_directories(dir_ / ".global_step0.pruning");
  save(2);
  EXPECT_THAT(entries(), ElementsAre("global_step1", "global_step2", "latest"));
}

TEST_F(SaveDirectory, BadTagsAndMissingCheckpointsAreRefusedWithTheFix) {
  for (const std::string tag : {"", ".hidden", "a/b", "latest"})
    EXPECT_THROW(check_tag(tag), UserError) << tag;
  try {
    resolve_checkpoint(dir_);
    FAIL() << "a missing directory resolved";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("not a directory"));
  }
  fs::create_directories(dir_);
  try {
    resolve_checkpoint(dir_);
    FAIL() << "an empty directory resolved";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("neither `latest` nor manifest.json"));
    EXPECT_THAT(error.fix(), HasSubstr("strata train --save-dir"));
  }
}

}  // namespace
}  // namespace strata::engine::checkpoint

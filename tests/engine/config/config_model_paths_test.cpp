// strata.model.from_pretrained and strata.model.config naming what is not there: a mistyped
// folder, a Hugging Face Hub id (strata reads local folders only), a folder without config.json,
// a missing config.json. Each is one problem naming the path, where a relative one was looked up
// and the fix, with no second, follow-on problem about seq_len.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/config/config_error.h"

namespace strata::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

// The problems of the config whose strata.model is `model` (JSON), or none when it loads.
std::vector<std::string> problems(const std::string& model) {
  try {
    parse_config_text(fmt::format(R"({{"train_micro_batch_size_per_gpu": 1,
        "strata": {{"model": {}}}}})",
                                  model),
                      "config");
  } catch (const ConfigError& error) {
    return error.problems();
  }
  return {};
}

// A folder in the current directory (where relative model paths are looked up), removed after.
struct LocalFolder {
  std::filesystem::path name;
  LocalFolder()
      : name(fmt::format("strata-model-paths-{}-{}",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                         ::testing::UnitTest::GetInstance()->random_seed())) {
    std::filesystem::create_directories(name);
  }
  ~LocalFolder() { std::filesystem::remove_all(name); }
};

std::string here() {
  return std::filesystem::current_path().string();
}

TEST(ConfigModelPaths, AMistypedFolderIsNamedWithTheDirectoryItWasLookedUpIn) {
  const std::vector<std::string> found = problems(R"({"from_pretrained": "no-such-model"})");
  ASSERT_THAT(found, SizeIs(1));
  EXPECT_THAT(found[0], HasSubstr("strata.model.from_pretrained: no such folder no-such-model "
                                  "(relative to the current directory, " +
                                  here() + ")"));
  EXPECT_THAT(found[0], HasSubstr("save_pretrained"));
  EXPECT_THAT(found[0], Not(HasSubstr("huggingface-cli")));
}

TEST(ConfigModelPaths, AnAbsolutePathIsNotSaidToBeRelative) {
  const std::filesystem::path missing =
      std::filesystem::temp_directory_path() / "strata-no-such-model" / "folder";
  const std::vector<std::string> found =
      problems(fmt::format(R"({{"from_pretrained": "{}"}})", missing.string()));
  ASSERT_THAT(found, SizeIs(1));
  EXPECT_THAT(found[0], HasSubstr("no such folder " + missing.string() + ":"));
  EXPECT_THAT(found[0], Not(HasSubstr("relative to")));
}

// transformers' from_pretrained downloads a Hub id; strata says how to.
TEST(ConfigModelPaths, AHubIdIsRefusedWithTheDownloadCommand) {
  const std::vector<std::string> found =
      problems(R"({"from_pretrained": "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "seq_len": 512})");
  ASSERT_THAT(found, SizeIs(1));
  EXPECT_THAT(found[0], HasSubstr("no such folder TinyLlama/TinyLlama-1.1B-Chat-v1.0 (relative "
                                  "to the current directory, " +
                                  here() + ")"));
  EXPECT_THAT(found[0], HasSubstr("Hugging Face Hub id"));
  EXPECT_THAT(found[0], HasSubstr("huggingface-cli download TinyLlama/TinyLlama-1.1B-Chat-v1.0 "
                                  "--local-dir TinyLlama-1.1B-Chat-v1.0"));
  EXPECT_THAT(found[0], HasSubstr("\"from_pretrained\": \"TinyLlama-1.1B-Chat-v1.0\""));
}

// owner/name whose owner is a local folder is a mistyped local path, not a Hub id.
TEST(ConfigModelPaths, AMissingFolderInsideALocalOneIsNoHubId) {
  const LocalFolder local;
  const std::vector<std::string> found =
      problems(fmt::format(R"({{"from_pretrained": "{}/tinyllama"}})", local.name.string()));
  ASSERT_THAT(found, SizeIs(1));
  EXPECT_THAT(found[0], HasSubstr("no such folder " + local.name.string() + "/tinyllama"));
  EXPECT_THAT(found[0], Not(HasSubstr("huggingface-cli")));
}

TEST(ConfigModelPaths, AFolderWithoutConfigJsonIsRefused) {
  const LocalFolder local;
  const std::vector<std::string> found =
      problems(fmt::format(R"({{"from_pretrained": "{}"}})", local.name.string()));
  ASSERT_THAT(found, SizeIs(1));
  EXPECT_THAT(found[0], HasSubstr(local.name.string() + " holds no config.json"));
}

TEST(ConfigModelPaths, AMissingConfigFileIsRefusedAlone) {
  const std::vector<std::string> found =
      problems(R"({"config": "no-such-model/config.json", "seq_len": 64})");
  ASSERT_THAT(found, SizeIs(1));
  EXPECT_THAT(found[0], HasSubstr("strata.model.config: no such file no-such-model/config.json "
                                  "(relative to the current directory, " +
                                  here() + ")"));
  EXPECT_THAT(found[0], Not(HasSubstr("huggingface-cli")));
  // A Hub id given as the config is downloaded as well.
  const std::vector<std::string> hub = problems(R"({"config": "Qwen/Qwen2-0.5B"})");
  ASSERT_THAT(hub, SizeIs(1));
  EXPECT_THAT(hub[0], HasSubstr("\"config\": \"Qwen2-0.5B/config.json\""));
}

TEST(ConfigModelPaths, AFolderGivenAsTheConfigNamesItsConfigJson) {
  const LocalFolder local;
  std::ofstream(local.name / "config.json") << R"({"model_type": "llama"})";
  const std::vector<std::string> found =
      problems(fmt::format(R"({{"config": "{}"}})", local.name.string()));
  ASSERT_THAT(found, SizeIs(1));
  EXPECT_THAT(found[0], HasSubstr(local.name.string() +
                                  " is a folder: give the path of a "
                                  "config.json (" +
                                  (local.name / "config.json").string() + ")"));
}

// A folder whose config.json is not JSON: one problem, not a second about seq_len's range.
TEST(ConfigModelPaths, AConfigJsonThatIsNotJsonIsOneProblem) {
  const LocalFolder local;
  std::ofstream(local.name / "config.json") << "not json";
  const std::vector<std::string> found =
      problems(fmt::format(R"({{"from_pretrained": "{}", "seq_len": 64}})", local.name.string()));
  ASSERT_THAT(found, SizeIs(1));
  EXPECT_THAT(found[0], HasSubstr("cannot be read as a JSON object"));
}

}  // namespace
}  // namespace strata::engine

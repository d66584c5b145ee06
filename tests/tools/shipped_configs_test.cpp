// Every file under configs/ trains: `strata config check` accepts it as shipped (and makes nothing,
// not even its swap folder), and `strata train` runs one step of a copy of it. The copy differs
// from the shipped file only where the test needs it to: one micro-batch per step instead of the
// file's accumulation (the memory a step needs is the micro-batch's, which stays), its swap folders
// in a temporary folder that does not exist yet (train makes them), and, for a model too big to
// step in seconds here, a small one of the same kind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/tools/run_strata.h"

namespace strata::tools::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Parameters above which a shipped model is replaced by a small one (configs/scale_2b.json's 2B
// model would take minutes a step on a CPU).
constexpr double kLargestModelStepped = 50e6;

std::vector<std::string> shipped_configs() {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry :
       fs::directory_iterator(fs::path(STRATA_SOURCE_DIR) / "configs")) {
    if (entry.is_regular_file()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// What the test changes in its copy (see the top of the file).
nlohmann::json shrunk(nlohmann::json config, const fs::path& scratch) {
  config["gradient_accumulation_steps"] = 1;
  config.erase("train_batch_size");
  nlohmann::json& zero = config["zero_optimization"];
  if (zero.is_object()) {
    for (const char* key : {"offload_param", "offload_optimizer"}) {
      if (zero.contains(key) && zero[key].value("device", "") == "nvme")
        zero[key]["nvme_path"] = (scratch / "swap" / "not-made-yet").string();
    }
  }
  nlohmann::json& strata = config["strata"];
  if (strata.contains("checkpoint")) strata["checkpoint"]["dir"] = (scratch / "saves").string();
  nlohmann::json& model = strata["model"];
  const double d_model = model.value("d_model", 512.0);
  if (12.0 * model.value("n_layer", 6.0) * d_model * d_model > kLargestModelStepped)
    model = {{"n_layer", 2}, {"n_head", 4}, {"d_model", 128}, {"seq_len", 64}, {"vocab", 256}};
  return config;
}

class ShippedConfig : public ::testing::TestWithParam<std::string> {};

TEST_P(ShippedConfig, IsValidAsShippedAndMakesNothing) {
  const fs::path shipped = fs::path(STRATA_SOURCE_DIR) / "configs" / GetParam();
  const bool swap_there_before = fs::exists("strata-swap");
  const RunResult result = run_strata({"config", "check", shipped.string()});
  EXPECT_EQ(result.exit_status, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr(": valid ("));
  // The check makes no swap folder: train makes it, when it starts the engine.
  if (!swap_there_before) {
    EXPECT_FALSE(fs::exists("strata-swap"));
  }
}

TEST_P(ShippedConfig, TrainsOneStep) {
  const fs::path shipped = fs::path(STRATA_SOURCE_DIR) / "configs" / GetParam();
  ASSERT_EQ(shipped.extension(), ".json") << "teach this test to copy " << GetParam();
  const std::string text_before = read_text(shipped);
  TempDir scratch;
  const fs::path copy =
      scratch.write(GetParam(), shrunk(nlohmann::json::parse(text_before), scratch.path()).dump(2));
  const RunResult result = run_strata({"train", "--config", copy.string(), "--steps", "1", "--out",
                                       (scratch.path() / "out").string()});
  EXPECT_EQ(result.exit_status, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("trained 1 steps"));
  const nlohmann::json config = nlohmann::json::parse(text_before);
  const nlohmann::json zero = config.value("zero_optimization", nlohmann::json::object());
  for (const char* key : {"offload_param", "offload_optimizer"}) {
    if (zero.contains(key) && zero[key].value("device", "") == "nvme") {
      EXPECT_TRUE(fs::is_directory(scratch.path() / "swap" / "not-made-yet")) << key;
    }
  }
  EXPECT_EQ(read_text(shipped), text_before) << "the shipped file changed";
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = fs::path(info.param).stem().string();
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Configs, ShippedConfig, ::testing::ValuesIn(shipped_configs()), test_name);

}  // namespace
}  // namespace strata::tools::testing

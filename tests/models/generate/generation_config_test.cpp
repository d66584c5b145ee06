// A folder's generation_config.json, read as transformers reads it, and what it refuses.
#include "models/generate/generation_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.h"

namespace strata::models::generate {
namespace {

// A folder of the test's own (ctest runs tests at once), holding generation_config.json with
// `text` unless it is empty.
class Folder {
 public:
  explicit Folder(const std::string& text)
      : path_(std::filesystem::temp_directory_path() /
              (std::string("strata-generation-") +
               ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
    if (!text.empty()) std::ofstream(path_ / "generation_config.json") << text;
  }
  ~Folder() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::string refusal(const std::string& text) {
  const Folder folder(text);
  try {
    static_cast<void>(read_generation_config(folder.path()));
  } catch (const UserError& error) {
    EXPECT_NE(error.fix().find("generation_config.json"), std::string::npos);
    return error.what();
  }
  return "(read without error)";
}

TEST(GenerationConfig, WithoutTheFileGenerationIsGreedy) {
  const GenerationDefaults defaults = read_generation_config(Folder("").path());
  EXPECT_FALSE(defaults.sampling.sample);
  EXPECT_EQ(defaults.sampling.top_k, 50);  // transformers' default, once sampling is asked for
  EXPECT_TRUE(defaults.eos_token_ids.empty());
  EXPECT_FALSE(defaults.max_new_tokens);
}

// Without generation_config.json, the end token is config.json's, as from_model_config takes it.
TEST(GenerationConfig, WithoutTheFileTheEndTokensAreTheModelConfigs) {
  const Folder folder("");
  std::ofstream(folder.path() / "config.json") << R"({"model_type": "llama", "eos_token_id": 2})";
  const GenerationDefaults defaults = read_generation_config(folder.path());
  EXPECT_FALSE(defaults.sampling.sample);
  EXPECT_EQ(defaults.eos_token_ids, (std::vector<std::int32_t>{2}));
}

// As Llama 3.1 Instruct ships it: sampling, two end tokens.
TEST(GenerationConfig, ReadsSamplingAndAListOfEndTokens) {
  const GenerationDefaults defaults = read_generation_config(
      Folder(
          R"({"bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128008, 128009],
                 "temperature": 0.6, "top_p": 0.9, "transformers_version": "4.43.0.dev0"})")
          .path());
  EXPECT_TRUE(defaults.sampling.sample);
  EXPECT_DOUBLE_EQ(defaults.sampling.temperature, 0.6);
  EXPECT_DOUBLE_EQ(defaults.sampling.top_p, 0.9);
  EXPECT_EQ(defaults.sampling.top_k, 50);
  EXPECT_DOUBLE_EQ(defaults.sampling.min_p, 0.0);
  EXPECT_EQ(defaults.eos_token_ids, (std::vector<std::int32_t>{128001, 128008, 128009}));
}

// As GPT-2 ships it: one end token, greedy.
TEST(GenerationConfig, ReadsOneEndToken) {
  const GenerationDefaults defaults = read_generation_config(
      Folder(R"({"bos_token_id": 50256, "eos_token_id": 50256, "min_p": null})").path());
  EXPECT_FALSE(defaults.sampling.sample);
  EXPECT_EQ(defaults.eos_token_ids, (std::vector<std::int32_t>{50256}));
  EXPECT_FALSE(defaults.max_new_tokens);
  EXPECT_EQ(read_generation_config(Folder(R"({"max_new_tokens": 40})").path()).max_new_tokens, 40);
}

TEST(GenerationConfig, RefusesWhatTransformersWouldRefuse) {
  EXPECT_NE(refusal(R"({"temperature": 0})").find("\"temperature\" is 0, not above 0"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"top_p": 1.5})").find("\"top_p\" is 1.5, not in (0, 1]"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"top_k": -1})").find("\"top_k\" is -1"), std::string::npos);
  EXPECT_NE(refusal(R"({"min_p": 2})").find("\"min_p\" is 2, not in [0, 1]"), std::string::npos);
  EXPECT_NE(refusal(R"({"eos_token_id": "</s>"})").find("\"eos_token_id\" holds \"</s>\""),
            std::string::npos);
  EXPECT_NE(refusal(R"({"do_sample": "yes"})").find("\"do_sample\" is \"yes\""), std::string::npos);
  EXPECT_NE(refusal(R"({"max_new_tokens": 0})").find("\"max_new_tokens\" is 0"), std::string::npos);
  EXPECT_NE(refusal("{not json").find("not JSON"), std::string::npos);
}

}  // namespace
}  // namespace strata::models::generate

// `strata tokenize` as a user runs it: ids out, text back, token files, and each mistake refused
// with its cause and fix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/models/tiny_tokenizer.h"
#include "tests/tools/run_strata.h"

namespace strata::tools {
namespace {

using ::testing::HasSubstr;
using testing::run_strata;
using testing::TempDir;

struct TokenizeTest : ::testing::Test {
  TempDir dir;
  std::string model = models::testing::write_tiny_tokenizer(dir.path() / "model").string();
};

TEST_F(TokenizeTest, EncodesStandardInputAndDecodesItBack) {
  const auto text = dir.write("text.txt", "hello hello");
  const auto encoded = run_strata({"tokenize", "--tokenizer", model, "--json"}, text);
  ASSERT_EQ(encoded.exit_status, 0) << encoded.err;
  const auto ids = nlohmann::json::parse(encoded.out)["ids"];
  EXPECT_EQ(ids, nlohmann::json::parse("[259, 32, 259]"));  // "hello", the byte " ", "hello"
  const auto ids_file = dir.write("ids.json", ids.dump());
  const auto decoded =
      run_strata({"tokenize", "--tokenizer", model, "--decode", "--json"}, ids_file);
  ASSERT_EQ(decoded.exit_status, 0) << decoded.err;
  EXPECT_EQ(nlohmann::json::parse(decoded.out)["text"], "hello hello");
}

TEST_F(TokenizeTest, WritesAnLlmcTokenFileOfTheInputsWithEosBetweenDocuments) {
  const auto lines = dir.write("a.jsonl", "{\"text\": \"hello\"}\n{\"text\": \"hell\"}\n");
  const auto out = dir.path() / "out.bin";
  const auto run =
      run_strata({"tokenize", "--tokenizer", model, "--output", out.string(), lines.string()});
  ASSERT_EQ(run.exit_status, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("4 tokens of 1 file(s) written to " + out.string()));
  std::ifstream file(out, std::ios::binary);
  std::vector<std::int32_t> header(256);
  file.read(reinterpret_cast<char*>(header.data()), 1024);
  EXPECT_EQ(header[0], 20240520);  // llm.c v1: 261 ids fit uint16
  EXPECT_EQ(header[2], 4);
  std::vector<std::uint16_t> ids(4);
  file.read(reinterpret_cast<char*>(ids.data()), 8);
  EXPECT_EQ(ids, (std::vector<std::uint16_t>{259, 260, 258, 260}));  // hello EOS hell EOS
}

TEST_F(TokenizeTest, RefusesInvalidUtf8NamingTheByte) {
  const auto text = dir.write("latin1.txt", "caf\xE9");
  const auto run = run_strata({"tokenize", "--tokenizer", model, "--json"}, text);
  EXPECT_EQ(run.exit_status, 2);
  EXPECT_THAT(run.err, HasSubstr("standard input is not valid UTF-8 at byte 3"));
  EXPECT_THAT(run.err, HasSubstr("fix: convert the text to UTF-8"));
}

TEST_F(TokenizeTest, RefusesAMissingTokenizerNamingTheFile) {
  const auto run = run_strata({"tokenize", "--tokenizer", dir.path().string(), "--json"},
                              dir.write("t.txt", "x"));
  EXPECT_EQ(run.exit_status, 1);
  EXPECT_THAT(run.err, HasSubstr((dir.path() / "tokenizer.json").string() + " does not exist"));
  EXPECT_THAT(run.err, HasSubstr("fix: this folder has no tokenizer.json"));
}

TEST_F(TokenizeTest, RefusesDecodeInputThatIsNoListOfIds) {
  const auto run = run_strata({"tokenize", "--tokenizer", model, "--decode", "--json"},
                              dir.write("ids.json", "{\"ids\": [1]}"));
  EXPECT_EQ(run.exit_status, 2);
  EXPECT_THAT(run.err, HasSubstr("--decode reads a JSON array of token ids"));
}

TEST_F(TokenizeTest, RefusesInputFilesWithoutOutputAndOutputWithoutInputs) {
  const auto text = dir.write("a.txt", "hello");
  const auto without_output = run_strata({"tokenize", "--tokenizer", model, text.string()});
  EXPECT_EQ(without_output.exit_status, 2);
  EXPECT_THAT(without_output.err, HasSubstr("fix: add --output OUT.bin"));
  const auto without_inputs =
      run_strata({"tokenize", "--tokenizer", model, "--output", (dir.path() / "o.bin").string()});
  EXPECT_EQ(without_inputs.exit_status, 2);
  EXPECT_THAT(without_inputs.err, HasSubstr("--output needs the text files to tokenize"));
  const auto csv = dir.write("a.csv", "hello");
  const auto wrong_kind = run_strata({"tokenize", "--tokenizer", model, "--output",
                                      (dir.path() / "o.bin").string(), csv.string()});
  EXPECT_EQ(wrong_kind.exit_status, 2);
  EXPECT_THAT(wrong_kind.err, HasSubstr(csv.string() + " is not a .txt, .jsonl or .ndjson file"));
}

struct TokenizeChatTest : ::testing::Test {
  TempDir dir;
  std::string model =
      models::testing::write_chat_tokenizer(dir.path() / "model", models::testing::kChatMlTemplate)
          .string();
};

TEST_F(TokenizeChatTest, RendersEncodesAndMasksAConversation) {
  const auto chat = dir.write("chat.json", R"({"messages": [{"role": "user", "content": "he"},
      {"role": "assistant", "content": "hello"}], "tools": []})");
  const auto run = run_strata({"tokenize", "--tokenizer", model, "--chat", "--json"}, chat);
  ASSERT_EQ(run.exit_status, 0) << run.err;
  const auto out = nlohmann::json::parse(run.out);
  EXPECT_EQ(out["text"],
            "<|im_start|>user\nhe<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n");
  const std::vector<int> mask(out["mask"].begin(), out["mask"].end());
  std::vector<int> expected(out["ids"].size(), 0);
  expected[expected.size() - 3] = 1;  // "hello"
  expected[expected.size() - 2] = 1;  // its <|im_end|>
  EXPECT_EQ(mask, expected);
  EXPECT_EQ(out["ids"][out["ids"].size() - 3], 259);
}

TEST_F(TokenizeChatTest, AddsTheGenerationPrompt) {
  const auto chat = dir.write("chat.json", R"({"messages": [{"role": "user", "content": "he"}]})");
  const auto run = run_strata(
      {"tokenize", "--tokenizer", model, "--chat", "--json", "--add-generation-prompt"}, chat);
  ASSERT_EQ(run.exit_status, 0) << run.err;
  EXPECT_EQ(nlohmann::json::parse(run.out)["text"],
            "<|im_start|>user\nhe<|im_end|>\n<|im_start|>assistant\n");
}

TEST_F(TokenizeChatTest, WritesTheMaskBesideTheTokenFile) {
  const auto lines = dir.write("pc.jsonl", R"({"prompt": "he", "completion": "hello"})"
                                           "\n");
  const auto out = dir.path() / "pc.bin";
  const auto run =
      run_strata({"tokenize", "--tokenizer", model, "--output", out.string(), lines.string()});
  ASSERT_EQ(run.exit_status, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("the loss mask to " + out.string() + ".mask"));
  std::ifstream mask(out.string() + ".mask", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(mask)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), 64u + 3u);  // "he" "hello" EOS
  EXPECT_EQ(bytes.substr(0, 8), "strmask1");
  EXPECT_EQ(bytes.substr(64), std::string("\x02\x01\x01"));  // the prompt starts, out of the loss
}

TEST_F(TokenizeChatTest, RefusesMistakesNamingTheFix) {
  const auto chat = dir.write("chat.json", R"({"turns": []})");
  const auto no_messages = run_strata({"tokenize", "--tokenizer", model, "--chat"}, chat);
  EXPECT_EQ(no_messages.exit_status, 2);
  EXPECT_THAT(no_messages.err, HasSubstr("--chat reads an object with a \"messages\" list"));
  const auto text = dir.write("text.txt", "hello");
  const auto without_chat =
      run_strata({"tokenize", "--tokenizer", model, "--add-generation-prompt"}, text);
  EXPECT_EQ(without_chat.exit_status, 2);
  EXPECT_THAT(without_chat.err, HasSubstr("fix: add --chat"));
  const std::string plain = models::testing::write_tiny_tokenizer(dir.path() / "plain").string();
  const auto no_template =
      run_strata({"tokenize", "--tokenizer", plain, "--chat"},
                 dir.write("c.json", R"({"messages": [{"role": "user", "content": "x"}]})"));
  EXPECT_EQ(no_template.exit_status, 2);
  EXPECT_THAT(no_template.err, HasSubstr("has no chat template"));
}

}  // namespace
}  // namespace strata::tools

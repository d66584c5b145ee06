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

}  // namespace
}  // namespace strata::tools

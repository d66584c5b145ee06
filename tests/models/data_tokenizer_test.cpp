// Data whose ids do not mean what the model's ids mean: text (read one token per byte) for a model
// shaped by a Hugging Face config.json without a tokenizer, a training and a validation file in
// different forms; each refused naming the file and how to make token files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/data/token_dataset.h"
#include "models/data/token_file.h"
#include "tests/models/data_test_util.h"

namespace strata::models {
namespace {

using ::testing::HasSubstr;
using testing::llmc_file;
using ::testing::Not;
using testing::raw_bytes;
using testing::temp_file;

// A folder standing for a Hugging Face model: config.json, and a tokenizer.json when asked.
struct ModelFolder {
  std::filesystem::path path;
  explicit ModelFolder(bool with_tokenizer) : path(temp_file("strata-tokenizer-model", "")) {
    std::filesystem::remove(path);
    std::filesystem::create_directories(path);
    std::ofstream(path / "config.json") << R"({"model_type": "llama", "vocab_size": 32000})";
    if (with_tokenizer) std::ofstream(path / "tokenizer.json") << "{}";
  }
  ~ModelFolder() { std::filesystem::remove_all(path); }
  std::filesystem::path config() const { return path / "config.json"; }
};

// "cause\nfix: fix" of the refusal check_tokenizer gives, or "no refusal".
std::string refusal(const TokenDataset& dataset, std::int64_t vocab,
                    const std::filesystem::path& hf_config) {
  try {
    dataset.check_tokenizer(vocab, hf_config);
  } catch (const UserError& error) {
    return std::string(error.what()) + "\nfix: " + error.fix();
  }
  return "no refusal";
}

// A 32,000-token Llama whose folder has no tokenizer.json, given text or JSON Lines: read as
// bytes they are not its ids, and nothing here can make them its ids.
TEST(DataTokenizer, TextForAModelWithoutATokenizerIsRefusedWithTheFix) {
  const ModelFolder model(/*with_tokenizer=*/false);
  for (const std::string extension : {".txt", ".jsonl"}) {
    const auto path =
        temp_file("strata-corpus", "{\"text\": \"hello world, hello strata\"}\n", extension);
    const std::string text = refusal(TokenDataset::from_file(path, 0.1), 32000, model.config());
    EXPECT_THAT(text, HasSubstr(path.string() + " is text"));
    EXPECT_THAT(text, HasSubstr(model.config().string()));
    EXPECT_THAT(text, HasSubstr("own tokenizer (32000 tokens)"));
    EXPECT_THAT(text, HasSubstr(model.path.string() + " holds no tokenizer.json"));
    EXPECT_THAT(text, HasSubstr("put the model's tokenizer.json"));
    EXPECT_THAT(text, HasSubstr("strata tokenize --tokenizer TOKENIZER_DIR --output " +
                                std::filesystem::path(path).replace_extension(".bin").string()));
    std::filesystem::remove(path);
  }
}

// Token files are the model's ids whatever made them; the built-in corpus is bytes for any model
// (it measures speed).
TEST(DataTokenizer, TokenFilesAndTheBuiltInCorpusAreTakenForAnyModel) {
  const ModelFolder model(/*with_tokenizer=*/true);
  const auto path = temp_file("strata-ids", raw_bytes(std::vector<std::uint16_t>(100, 300)));
  EXPECT_EQ(refusal(TokenDataset::from_file(path, 0.1, "uint16"), 32000, model.config()),
            "no refusal");
  TokenDataset corpus = TokenDataset::from_tokens(std::vector<std::uint16_t>(100, 'a'), 0.1);
  corpus.byte_level = true;
  EXPECT_EQ(refusal(corpus, 32000, model.config()), "no refusal");
  std::filesystem::remove(path);
}

// The built-in GPT's ids are bytes: a text file's own, and for JSON Lines each line's "text"
// followed by a newline (the JSON around it is no part of the document).
TEST(DataTokenizer, TheBuiltInGptReadsTextAndTheTextOfJsonLinesAsBytes) {
  const auto text = temp_file("strata-corpus", "hello world, hello strata", ".txt");
  EXPECT_EQ(refusal(TokenDataset::from_file(text, 0.1), 256, ""), "no refusal");
  // Bytes are bytes: a file that is not UTF-8 is as good a text to the byte model.
  const auto latin1 = temp_file("strata-latin1", "caf\xE9 au lait", ".txt");
  std::vector<std::int32_t> latin1_ids(12);
  TokenDataset::from_file(latin1, 0.0).train().copy(0, latin1_ids);
  EXPECT_EQ(latin1_ids[3], 0xE9);
  std::filesystem::remove(latin1);
  const auto lines =
      temp_file("strata-corpus", "{\"text\": \"hi\"}\n\n{\"text\": \"yo\", \"id\": 2}\n", ".jsonl");
  const TokenDataset dataset = TokenDataset::from_file(lines, 0.0);
  EXPECT_EQ(refusal(dataset, 256, ""), "no refusal");
  std::vector<std::int32_t> ids(dataset.train().size());
  dataset.train().copy(0, ids);
  EXPECT_EQ(ids, (std::vector<std::int32_t>{'h', 'i', '\n', 'y', 'o', '\n'}));
  std::filesystem::remove(text);
  std::filesystem::remove(lines);
}

// Bytes need 256 ids; a Hugging Face model cannot change its vocabulary, so its fix is data.
TEST(DataTokenizer, AVocabularyBelowTheBytesIsRefused) {
  const auto path = temp_file("strata-corpus", "hello world, hello strata", ".txt");
  TokenDataset dataset = TokenDataset::from_file(path, 0.1);
  EXPECT_THAT(refusal(dataset, 128, ""),
              HasSubstr("strata.model.vocab 128 is smaller than the byte tokenizer's 256 tokens"));
  EXPECT_THAT(refusal(dataset, 128, ""), HasSubstr("\"vocab\": 256}} or more"));
  TokenDataset corpus = TokenDataset::from_tokens(std::vector<std::uint16_t>(100, 'a'), 0.1);
  corpus.byte_level = true;
  EXPECT_THAT(refusal(corpus, 64, "model/config.json"), HasSubstr("give a token file"));
  std::filesystem::remove(path);
}

// A training file of token ids and a validation file of text (or the reverse) disagree on what an
// id is.
TEST(DataTokenizer, SplitsInDifferentFormsAreRefused) {
  const auto ids = temp_file("strata-ids", llmc_file(std::vector<std::uint16_t>(100, 300)), ".bin");
  const auto text = temp_file("strata-corpus", "hello world, hello strata", ".txt");
  const std::string refused = refusal(TokenDataset::from_file(ids, 0.1, "", text), 50257, "");
  EXPECT_THAT(refused, HasSubstr("the training file " + ids.string() + " is llm.c .bin v1"));
  EXPECT_THAT(refused, HasSubstr("the validation file " + text.string() + " is text"));
  EXPECT_THAT(refused, HasSubstr("their ids mean different things"));
  std::filesystem::remove(ids);
  std::filesystem::remove(text);
}

}  // namespace
}  // namespace strata::models

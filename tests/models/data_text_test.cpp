// Text as users have it, made ids by a model folder's own tokenizer: .txt files (one document),
// JSON Lines (a document per line's "text"), packed back to back with EOS between them, and the
// token cache beside the data that makes that happen once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/data/text_tokens.h"
#include "models/data/token_cache.h"
#include "models/data/token_dataset.h"
#include "tests/models/data_test_util.h"
#include "tests/models/tiny_tokenizer.h"

namespace strata::models {
namespace {

using ::testing::HasSubstr;
using testing::refusal_of;
using testing::temp_file;
using testing::write_tiny_tokenizer;
using tokenizer::Tokenizer;

// A temporary folder per test, removed at the end.
struct Folder : testing::TempFolder {
  Folder() : TempFolder("strata-text-data") {}
};

std::vector<std::int32_t> all_tokens(const TokenDataset& dataset) {
  std::vector<std::int32_t> ids(dataset.train().size());
  dataset.train().copy(0, ids);
  return ids;
}

TokenDataset open_text(const std::filesystem::path& path, const Tokenizer& tokenizer) {
  TextTokenizing text;
  text.tokenizer = [&tokenizer] { return &tokenizer; };
  return TokenDataset::from_file(path, 0.0, "", "", text);
}

std::vector<std::int32_t> concat(std::initializer_list<std::vector<std::int32_t>> parts) {
  std::vector<std::int32_t> all;
  for (const auto& part : parts)
    all.insert(all.end(), part.begin(), part.end());
  return all;
}

TEST(DataText, ATextFileIsOneDocumentEndedByEos) {
  const Folder folder;
  const Tokenizer tokenizer = Tokenizer::load(write_tiny_tokenizer(folder.path / "model"));
  const std::int32_t eos = *tokenizer.eos_id();
  const auto path = folder.write("train.txt", "hello hello\n\nhello");
  EXPECT_EQ(all_tokens(open_text(path, tokenizer)),
            concat({tokenizer.encode("hello hello\n\nhello"), {eos}}));
  // "hello" is one token by the merges; " hello" starts with a space, which has none.
  EXPECT_EQ(tokenizer.encode("hello"), (std::vector<std::int32_t>{259}));
}

TEST(DataText, JsonLinesAreDocumentsBackToBackWithEosBetween) {
  const Folder folder;
  const Tokenizer tokenizer = Tokenizer::load(write_tiny_tokenizer(folder.path / "model"));
  const std::int32_t eos = *tokenizer.eos_id();
  const auto path = folder.write(
      "train.jsonl", "{\"text\": \"hello\"}\n\n  \n{\"text\": \"he said \\u00e9\", \"id\": 7}\n");
  EXPECT_EQ(
      all_tokens(open_text(path, tokenizer)),
      concat({tokenizer.encode("hello"), {eos}, tokenizer.encode("he said \xC3\xA9"), {eos}}));
}

TEST(DataText, AJsonLineWithNoKnownFieldIsRefusedNamingTheLineAndItsFields) {
  const Folder folder;
  const Tokenizer tokenizer = Tokenizer::load(write_tiny_tokenizer(folder.path / "model"));
  const auto path =
      folder.write("chat.jsonl", "{\"text\": \"hello\"}\n{\"question\": \"hi\", \"answer\": 1}\n");
  const std::string refused = refusal_of([&] { open_text(path, tokenizer); });
  EXPECT_THAT(refused, HasSubstr(path.string() + " line 2 has none of the fields"));
  EXPECT_THAT(refused, HasSubstr("it has the fields \"question\", \"answer\""));
  const auto not_json = folder.write("broken.jsonl", "{\"text\": \"hello\"}\n{\"text\": \n");
  EXPECT_THAT(refusal_of([&] { open_text(not_json, tokenizer); }),
              HasSubstr(not_json.string() + " line 2 is not JSON"));
}

TEST(DataText, InvalidUtf8IsRefusedNamingTheFileAndByte) {
  const Folder folder;
  const Tokenizer tokenizer = Tokenizer::load(write_tiny_tokenizer(folder.path / "model"));
  const auto path = folder.write("latin1.txt", "caf\xE9 au lait");
  EXPECT_THAT(refusal_of([&] { open_text(path, tokenizer); }),
              HasSubstr(path.string() + " is not valid UTF-8 at byte 3"));
  const auto lines = folder.write("latin1.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"caf\xE9\"}\n");
  EXPECT_THAT(refusal_of([&] { open_text(lines, tokenizer); }),
              HasSubstr(lines.string() + " is not valid UTF-8 at byte 28"));
}

// The second run reads the cache: proven by a cache whose ids were changed on disk coming back.
TEST(DataText, TheCacheIsReadOnTheSecondRun) {
  const Folder folder;
  const Tokenizer tokenizer = Tokenizer::load(write_tiny_tokenizer(folder.path / "model"));
  const auto path = folder.write("train.txt", "hello");
  const std::vector<std::int32_t> first = all_tokens(open_text(path, tokenizer));
  const std::filesystem::path cache = token_cache_path(path);
  ASSERT_TRUE(std::filesystem::exists(cache));
  {
    std::fstream file(cache, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(1024);
    const std::uint16_t marked = 7;
    file.write(reinterpret_cast<const char*>(&marked), sizeof(marked));
  }
  std::vector<std::int32_t> expected = first;
  expected[0] = 7;
  EXPECT_EQ(all_tokens(open_text(path, tokenizer)), expected);
}

// Another tokenizer, or a changed text, makes the cache again: a stale one is never read.
TEST(DataText, AnotherTokenizerOrAChangedTextRebuildsTheCache) {
  const Folder folder;
  const Tokenizer merging = Tokenizer::load(write_tiny_tokenizer(folder.path / "a"));
  const Tokenizer bytes_only = Tokenizer::load(write_tiny_tokenizer(folder.path / "b", {}));
  const auto path = folder.write("train.txt", "hello");
  EXPECT_EQ(all_tokens(open_text(path, merging)), (std::vector<std::int32_t>{259, 260}));
  EXPECT_EQ(all_tokens(open_text(path, bytes_only)),
            (std::vector<std::int32_t>{'h', 'e', 'l', 'l', 'o', 256}));
  folder.write("train.txt", "hello hello");
  EXPECT_EQ(all_tokens(open_text(path, merging)), concat({merging.encode("hello hello"), {260}}));
}

// A cache that cannot be written beside its text (here /proc, which no one can create files in,
// root included) is refused with the other way: a token file written elsewhere.
TEST(DataText, ACacheThatCannotBeWrittenNamesTheFolderAndTheOtherWay) {
  const Folder folder;
  const Tokenizer tokenizer = Tokenizer::load(write_tiny_tokenizer(folder.path / "model"));
  const std::string refused =
      refusal_of([&] { cached_tokens("/proc/version", tokenizer, nullptr, {}); });
  EXPECT_THAT(refused, HasSubstr("the token cache of /proc/version: cannot create "
                                 "/proc/version.strata-tokens.bin.partial."));
  EXPECT_THAT(refused, HasSubstr("strata tokenize --tokenizer " + tokenizer.source() +
                                 " --output OUT.bin /proc/version"));
  EXPECT_FALSE(std::filesystem::exists("/proc/version.strata-tokens.bin"));
}

TEST(DataText, ThreadCountsGiveTheSameIds) {
  const Folder folder;
  const Tokenizer tokenizer = Tokenizer::load(write_tiny_tokenizer(folder.path / "model"));
  std::string lines;
  for (int i = 0; i < 3000; ++i)
    lines += fmt::format("{{\"text\": \"hello {} hell\"}}\n", i);
  const std::filesystem::path inputs[] = {folder.write("many.jsonl", lines)};
  TokenizeOptions one;
  one.threads = 1;
  TokenizeOptions two;
  two.threads = 2;
  const auto serial = tokenize_files(inputs, tokenizer, one);
  EXPECT_EQ(serial, tokenize_files(inputs, tokenizer, two));
  EXPECT_EQ(std::count(serial.ids.begin(), serial.ids.end(), 260u), 3000);
}

TEST(DataText, ATokenizerWithoutEosIsRefused) {
  const Folder folder;
  const Tokenizer tokenizer =
      Tokenizer::load(write_tiny_tokenizer(folder.path / "model", testing::kTinyMerges, ""));
  const std::filesystem::path inputs[] = {folder.write("train.txt", "hello")};
  const std::string refused = refusal_of([&] { tokenize_files(inputs, tokenizer, {}); });
  EXPECT_THAT(refused, HasSubstr("names no end-of-sequence token"));
  EXPECT_THAT(refused, HasSubstr("set \"eos_token\" in the tokenizer_config.json"));
}

TEST(DataText, ATokenizerPastTheModelsVocabularyIsRefusedNamingBoth) {
  const Folder folder;
  write_tiny_tokenizer(folder.path);
  const auto config = folder.write("config.json", "{}");
  const std::string refused = refusal_of([&] { model_tokenizer(config, 100); });
  EXPECT_THAT(refused, HasSubstr((folder.path / "tokenizer.json").string() +
                                 " makes ids up to 260, past the 100 rows"));
  EXPECT_THAT(refused, HasSubstr(config.string()));
  EXPECT_TRUE(model_tokenizer(config, 261).has_value());
  EXPECT_FALSE(model_tokenizer("", 261).has_value());
}

}  // namespace
}  // namespace strata::models

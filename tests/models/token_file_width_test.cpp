// Token files whose bytes disagree with the width the config declares ("strata.data.dtype"): an
// llm.c header, a Megatron index, or the zeros a uint32 file shows when read as uint16, each
// refused naming the file and the dtype that reads it; and genuine uint16 files still read.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/data/token_file.h"
#include "tests/models/data_test_util.h"

namespace strata::models {
namespace {

using ::testing::HasSubstr;
using testing::llmc_file;
using testing::raw_bytes;
using testing::temp_file;
using testing::write_megatron;

// "cause\nfix: fix" of the refusal opening `path` with `dtype` gives, or "no refusal".
std::string refusal(const std::filesystem::path& path, const std::string& dtype) {
  try {
    open_token_file(path, dtype, "strata.data.path");
  } catch (const UserError& error) {
    return std::string(error.what()) + "\nfix: " + error.fix();
  }
  return "no refusal";
}

// `count` ids spread over [0, vocab) by a fixed stride, as tokenized text looks to these checks.
template <typename Token>
std::vector<Token> spread_ids(std::size_t count, std::uint32_t vocab, std::uint32_t first = 0) {
  std::vector<Token> ids(count);
  for (std::size_t i = 0; i < count; ++i)
    ids[i] = static_cast<Token>(first + (i * 7919 + i / 3) % vocab);
  return ids;
}

// GPT-2 ids written as uint32 and declared uint16: every second uint16 is 0.
TEST(TokenFileWidth, Uint32IdsDeclaredUint16AreRefused) {
  const auto path =
      temp_file("strata-u32-as-u16", raw_bytes(spread_ids<std::uint32_t>(1000, 50257)));
  const std::string text = refusal(path, "uint16");
  EXPECT_THAT(text, HasSubstr(path.string()));
  EXPECT_THAT(text, HasSubstr("little-endian uint32 ids"));
  EXPECT_THAT(text, HasSubstr("twice the real count"));
  EXPECT_THAT(text, HasSubstr("fix: set \"strata\": {\"data\": {\"dtype\": \"uint32\"}}"));
  EXPECT_EQ(open_token_file(path, "uint32", "strata.data.path").tokens.size(), 1000u);
  std::filesystem::remove(path);
}

// Llama 3's ids reach 128,255: their high halves are 0 or 1, not all 0.
TEST(TokenFileWidth, WideVocabularyIdsDeclaredUint16AreRefused) {
  const auto path =
      temp_file("strata-llama3-as-u16", raw_bytes(spread_ids<std::uint32_t>(4096, 128256)));
  EXPECT_THAT(refusal(path, "uint16"), HasSubstr("little-endian uint32 ids"));
  std::filesystem::remove(path);
}

// Big-endian uint32 puts the zero half first.
TEST(TokenFileWidth, BigEndianUint32IdsAreRefused) {
  std::vector<std::uint16_t> halves;
  for (std::uint32_t id : spread_ids<std::uint32_t>(200, 50257)) {
    halves.push_back(0);
    halves.push_back(static_cast<std::uint16_t>(id));
  }
  const auto path = temp_file("strata-u32-big-endian", raw_bytes(halves));
  EXPECT_THAT(refusal(path, "uint16"), HasSubstr("big-endian uint32 ids"));
  std::filesystem::remove(path);
}

// uint16 files as tokenizers write them, small vocabularies included, and a file too short to
// judge, read as declared.
TEST(TokenFileWidth, GenuineUint16FilesAreRead) {
  const std::vector<std::vector<std::uint16_t>> files = {
      spread_ids<std::uint16_t>(5000, 50257), spread_ids<std::uint16_t>(5000, 16),
      spread_ids<std::uint16_t>(5000, 64),    std::vector<std::uint16_t>(100, 0),
      std::vector<std::uint16_t>(100, 300),   {7, 0, 9, 0, 11, 0}};
  for (const std::vector<std::uint16_t>& ids : files) {
    const auto path = temp_file("strata-genuine-u16", raw_bytes(ids));
    EXPECT_EQ(refusal(path, "uint16"), "no refusal") << ids.size() << " ids from " << ids[0];
    std::filesystem::remove(path);
  }
}

// A dtype beside an llm.c header would read the header as 512 (or 256) tokens.
TEST(TokenFileWidth, ADtypeBesideAnLlmcHeaderIsRefused) {
  const auto path = temp_file("strata-llmc-dtype", "");
  const std::string bin = path.string() + ".bin";
  std::filesystem::rename(path, bin);
  std::ofstream(bin, std::ios::binary | std::ios::trunc)
      << llmc_file(spread_ids<std::uint32_t>(100, 128256), 20240801, 7);
  for (const std::string dtype : {"uint16", "uint32"}) {
    const std::string text = refusal(bin, dtype);
    EXPECT_THAT(text, HasSubstr("starts with llm.c's header (magic 20240801 version 7"));
    EXPECT_THAT(text, HasSubstr("fix: remove \"dtype\""));
  }
  std::ofstream(bin, std::ios::binary | std::ios::trunc)
      << llmc_file(spread_ids<std::uint16_t>(100, 50257));
  EXPECT_THAT(refusal(bin, "uint16"), HasSubstr("magic 20240520 version 1: uint16 tokens"));
  EXPECT_EQ(refusal(bin, ""), "no refusal");
  std::filesystem::remove(bin);
}

// A Megatron pair of int32 ids declared uint16: the index's count is half what uint16 reads.
TEST(TokenFileWidth, ADtypeThatDisagreesWithAMegatronIndexIsRefused) {
  const auto prefix = temp_file("strata-megatron-dtype", "");
  std::filesystem::remove(prefix);
  const std::vector<std::vector<std::uint32_t>> documents = {
      spread_ids<std::uint32_t>(30, 128256), spread_ids<std::uint32_t>(50, 128256, 3)};
  write_megatron(prefix, documents, 4);
  const std::string text = refusal(prefix.string() + ".bin", "uint16");
  EXPECT_THAT(text, HasSubstr("reads 160 tokens"));
  EXPECT_THAT(text, HasSubstr(".idx lists 80 tokens of int32"));
  EXPECT_THAT(text, HasSubstr("fix: remove \"dtype\""));
  // The width the index gives, declared or not, reads the documents back to back.
  for (const std::string dtype : {"", "uint32"}) {
    const TokenFile file = open_token_file(prefix, dtype, "strata.data.path");
    ASSERT_EQ(file.tokens.size(), 80u) << dtype;
    EXPECT_EQ(file.tokens[30], documents[1][0]) << dtype;
  }
  std::filesystem::remove(prefix.string() + ".bin");
  std::filesystem::remove(prefix.string() + ".idx");
}

// uint16 ids declared uint32 pair up into ids of 65,536 and more: the refusal of the first one
// past the vocabulary names the narrower dtype.
TEST(TokenFileWidth, Uint16IdsDeclaredUint32AreNamedWhenRefused) {
  const auto path =
      temp_file("strata-u16-as-u32", raw_bytes(spread_ids<std::uint16_t>(1000, 50257)));
  const TokenFile file = open_token_file(path, "uint32", "strata.data.path");
  try {
    check_token_ids(file, 50257, "");
    FAIL() << "expected a UserError";
  } catch (const UserError& error) {
    EXPECT_THAT(error.fix(), HasSubstr("if the file holds 16-bit ids"));
    EXPECT_THAT(error.fix(), HasSubstr("\"dtype\": \"uint16\""));
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace strata::models

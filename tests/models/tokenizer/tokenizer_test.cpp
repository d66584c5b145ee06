// The Tokenizer as a whole: the files and texts it refuses, what it tells about its tokens, and
// encoding from many threads at once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "tests/models/tokenizer/tokenizer_test_util.h"

namespace strata::models::tokenizer {
namespace {

using testing::added_token;
using ::testing::AllOf;
using testing::bpe_file;
using testing::byte_level_alphabet;
using ::testing::HasSubstr;
using testing::Json;
using testing::refusal_of_text;
using testing::Strings;
using testing::TestTokenizer;
using testing::vocab_of;

TEST(Tokenizer, RefusesInvalidUtf8NamingTheByteOffset) {
  const TestTokenizer tokenizer(bpe_file(vocab_of({"a", "b"})));
  try {
    tokenizer.ids("ab\xFFz");
    FAIL() << "invalid UTF-8 was encoded";
  } catch (const UserError& error) {
    EXPECT_THAT(error.what(), HasSubstr("not valid UTF-8 at byte 2"));
  }
  EXPECT_THROW(tokenizer.ids("a\xC3"), UserError);  // a truncated sequence at the end
}

TEST(Tokenizer, RefusesAFileThatIsNotJson) {
  EXPECT_THAT(refusal_of_text("{\"model\": "), HasSubstr("tests/tokenizer.json is not valid JSON"));
  EXPECT_THAT(refusal_of_text(bpe_file(vocab_of({"a"})).dump(), "{"),
              HasSubstr("tokenizer_config.json beside tests/tokenizer.json is not valid JSON"));
}

TEST(Tokenizer, RefusesAFileWithoutAModel) {
  EXPECT_THAT(refusal_of_text("{}"),
              AllOf(HasSubstr("tests/tokenizer.json"), HasSubstr("\"model\" is missing")));
  EXPECT_THAT(refusal_of_text("[1, 2]"),
              AllOf(HasSubstr("tests/tokenizer.json"), HasSubstr("\"model\" is missing")));
  EXPECT_THAT(refusal_of_text(""), HasSubstr("\"model\" is missing"));
}

TEST(Tokenizer, RefusesAComponentWithoutAType) {
  Json file = bpe_file(vocab_of({"a"}));
  file["decoder"] = {{"content", " "}};
  EXPECT_THAT(testing::refusal_of(file),
              AllOf(HasSubstr("the decoder of tests/tokenizer.json"), HasSubstr("\"type\"")));
}

// A Replace or Split without its "pattern" is refused as a missing field.
TEST(Tokenizer, RefusesAComponentWithoutItsPattern) {
  const std::vector<std::pair<const char*, Json>> components = {
      {"normalizer", {{"type", "Replace"}, {"content", " "}}},
      {"pre_tokenizer", {{"type", "Split"}, {"behavior", "Removed"}}},
      {"decoder", {{"type", "Replace"}, {"content", " "}}}};
  for (const auto& [name, component] : components) {
    Json file = bpe_file(vocab_of({"a"}));
    file[name] = component;
    EXPECT_THAT(testing::refusal_of(file),
                AllOf(HasSubstr(std::string("the ") + name + " of tests/tokenizer.json"),
                      HasSubstr("\"pattern\" is missing")));
  }
}

TEST(Tokenizer, TellsItsTokensAndSize) {
  Json file = bpe_file(vocab_of({"a", "b"}));
  file["added_tokens"].push_back(added_token("<|end|>", 5, true));
  const TestTokenizer tokenizer(file);
  EXPECT_EQ(tokenizer.get().token_to_id("b"), 1);
  EXPECT_EQ(tokenizer.get().token_to_id("<|end|>"), 5);
  EXPECT_EQ(tokenizer.get().token_to_id("c"), std::nullopt);
  EXPECT_EQ(tokenizer.get().vocab_size(), 6);  // one past the largest id, gaps included
  EXPECT_EQ(tokenizer.get().source(), "tests/tokenizer.json");
}

TEST(Tokenizer, EncodeIntoAppends) {
  const TestTokenizer tokenizer(bpe_file(vocab_of({"a", "b"})));
  std::vector<std::int32_t> ids = {7};
  tokenizer.get().encode_into("ab", true, ids);
  EXPECT_EQ(ids, (std::vector<std::int32_t>{7, 0, 1}));
}

// The content hash keys caches of token files: a config that changes the ids must change it.
TEST(Tokenizer, ContentHashFollowsTheFileAndTheConfig) {
  const std::string file = bpe_file(vocab_of({"a", "b"})).dump();
  const auto hash = [&](std::string_view tokenizer_json, std::string_view config_json) {
    return Tokenizer::from_json_text(tokenizer_json, config_json, "x").content_hash();
  };
  EXPECT_EQ(hash(file, ""), hash(file, ""));
  EXPECT_NE(hash(file, ""), hash(file, R"({"add_bos_token": false})"));
  EXPECT_NE(hash(file, ""), hash(bpe_file(vocab_of({"b", "a"})).dump(), ""));
}

// Each thread keeps a cache of words it has tokenized, for one model at a time: a second
// tokenizer used on the same thread must not be answered from the first's.
TEST(Tokenizer, TwoTokenizersOnOneThreadKeepTheirOwnIds) {
  const TestTokenizer first(bpe_file(vocab_of({"a", "b", "ab"}), {"a b"}));
  const TestTokenizer second(bpe_file(vocab_of({"ab", "b", "a"})));
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(first.tokens("ab"), (Strings{"ab"}));
    EXPECT_EQ(second.tokens("ab"), (Strings{"a", "b"}));
  }
}

// A byte-level tokenizer with merges, a normalizer and added tokens, so that each thread fills
// its word cache, its regex scratch and its pre-tokenizer frames at once with the others.
Json busy_file() {
  Strings vocabulary = byte_level_alphabet();
  for (const char* merged : {"he", "ll", "llo", "hello", "\u0120w", "\u0120wo", "or", "\u0120wor"})
    vocabulary.push_back(merged);
  Json file = bpe_file(vocab_of(vocabulary), {"h e", "l l", "ll o", "he llo", "\u0120 w",
                                              "\u0120w o", "o r", "\u0120wo r"});
  file["normalizer"] = {{"type", "NFC"}};
  file["pre_tokenizer"] = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  file["decoder"] = {{"type", "ByteLevel"}};
  file["added_tokens"].push_back(added_token("<|end|>", 264, true));
  return file;
}

TEST(Tokenizer, EncodesTheSameFromManyThreadsAtOnce) {
  const TestTokenizer tokenizer(busy_file());
  const Strings texts = {"hello world", "hello<|end|>world hello",
                         "e\u0301t\u00E9 \u4E16\u754C   hello\n\n", "worlds of hello, hello, hello",
                         "\U0001F600 1234 5678 hello"};
  std::vector<std::vector<std::int32_t>> expected;
  for (const std::string& text : texts)
    expected.push_back(tokenizer.ids(text));
  constexpr int thread_count = 4;
  constexpr int rounds = 1000;
  std::vector<int> mismatches(thread_count, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      // Each thread starts at a different text, so that different words are in flight at once.
      for (int round = 0; round < rounds; ++round) {
        const std::size_t index = (static_cast<std::size_t>(t) + round) % texts.size();
        if (tokenizer.ids(texts[index]) != expected[index]) ++mismatches[t];
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(thread_count, 0));
  EXPECT_EQ(tokenizer.get().decode(expected[1]), texts[1]);
}

}  // namespace
}  // namespace strata::models::tokenizer

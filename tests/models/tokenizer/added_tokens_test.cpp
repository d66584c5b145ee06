// Added tokens: where they are found (before or after normalization), which wins when several
// match, and the options that take white space or require word boundaries. The model's vocabulary
// is single characters without merges, so text outside added tokens comes back letter by letter.
// Expected tokens are those of the Hugging Face tokenizers (the Rust library).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/models/tokenizer/tokenizer_test_util.h"

namespace strata::models::tokenizer {
namespace {

using testing::added_token;
using testing::bpe_file;
using testing::Json;
using testing::Strings;
using testing::TestTokenizer;
using testing::vocab_of;

// The model's tokens, one per character; the combining acute and "½" test word boundaries.
const Strings letters = testing::characters_of("abc helowrd<>sxy_\u0301\u00BD");

// A file of `letters` with `tokens` added after them (ids from letters.size() on).
Json with_added(const std::vector<Json>& tokens) {
  Json file = bpe_file(vocab_of(letters));
  file["added_tokens"] = tokens;
  return file;
}

std::int32_t added_id(int index) {
  return static_cast<std::int32_t>(letters.size()) + index;
}

// A non-special token matched in the raw text, with one option set.
Json raw_token(const std::string& content, int index, const char* option = nullptr) {
  Json token = added_token(content, added_id(index), false);
  token["normalized"] = false;
  if (option != nullptr) token[option] = true;
  return token;
}

TEST(AddedTokens, SpecialAndOtherTokensAreFoundInTheText) {
  const TestTokenizer tokenizer(
      with_added({added_token("<s>", added_id(0), true), raw_token("<x>", 1)}));
  EXPECT_EQ(tokenizer.tokens("a<s>b<x>c"), (Strings{"a", "<s>", "b", "<x>", "c"}));
  EXPECT_EQ(tokenizer.tokens("<s><s>"), (Strings{"<s>", "<s>"}));
}

// The null decoder joins tokens with spaces; skipping special tokens drops "<s>" only.
TEST(AddedTokens, DecodingSkipsOnlySpecialTokens) {
  const TestTokenizer tokenizer(
      with_added({added_token("<s>", added_id(0), true), raw_token("<x>", 1)}));
  EXPECT_EQ(tokenizer.decode({"a", "<s>", "b", "<x>"}), "a <s> b <x>");
  EXPECT_EQ(tokenizer.decode({"a", "<s>", "b", "<x>"}, true), "a b <x>");
}

// normalized: true tokens are normalized themselves ("WoRd" becomes "word") and found in the
// normalized text; normalized: false ones are found in the raw text, as written.
TEST(AddedTokens, NormalizedTokensAreFoundAfterTheNormalizer) {
  Json file = with_added({added_token("hello", added_id(0), false), raw_token("Bye", 1),
                          added_token("WoRd", added_id(2), false)});
  file["normalizer"] = {{"type", "Lowercase"}};
  const TestTokenizer tokenizer(file);
  EXPECT_EQ(tokenizer.tokens("HELLO world"), (Strings{"hello", " ", "w", "o", "r", "l", "d"}));
  EXPECT_EQ(tokenizer.tokens("WORD"), (Strings{"WoRd"}));
  EXPECT_EQ(tokenizer.tokens("say Bye"), (Strings{"s", "a", "y", " ", "Bye"}));
  EXPECT_EQ(tokenizer.tokens("BYE"), (Strings{"b", "y", "e"}));  // not "Bye" in the raw text
}

// A normalized token matches text that only normalization makes equal to it: NFKC folds the
// fullwidth brackets of "＜x＞".
TEST(AddedTokens, NormalizedTokensMatchTheNormalizedForm) {
  Json file = with_added({added_token("<x>", added_id(0), false)});
  file["normalizer"] = {{"type", "NFKC"}};
  EXPECT_EQ(TestTokenizer(file).tokens("a\uFF1Cx\uFF1E"), (Strings{"a", "<x>"}));
}

TEST(AddedTokens, TheLongestTokenStartingFirstWins) {
  // Listed shortest first, so that the order of the file does not decide.
  const TestTokenizer tokenizer(with_added({raw_token("<a>", 0), raw_token("<ab>", 1)}));
  EXPECT_EQ(tokenizer.tokens("<ab><a>b"), (Strings{"<ab>", "<a>", "b"}));
  EXPECT_EQ(tokenizer.tokens("<a><ab"), (Strings{"<a>", "<", "a", "b"}));
}

TEST(AddedTokens, LstripTakesTheWhiteSpaceBefore) {
  const TestTokenizer tokenizer(with_added({raw_token("<x>", 0, "lstrip")}));
  EXPECT_EQ(tokenizer.tokens("a  <x>  b"), (Strings{"a", "<x>", " ", " ", "b"}));
  EXPECT_EQ(tokenizer.tokens("  <x>"), (Strings{"<x>"}));
}

TEST(AddedTokens, RstripTakesTheWhiteSpaceAfter) {
  const TestTokenizer tokenizer(with_added({raw_token("<x>", 0, "rstrip")}));
  EXPECT_EQ(tokenizer.tokens("a  <x>  b"), (Strings{"a", " ", " ", "<x>", "b"}));
  EXPECT_EQ(tokenizer.tokens("<x>  "), (Strings{"<x>"}));
}

// The second token's lstrip finds the space already taken by the first's rstrip.
TEST(AddedTokens, StripsDoNotOverlap) {
  Json token = raw_token("<x>", 0, "lstrip");
  token["rstrip"] = true;
  EXPECT_EQ(TestTokenizer(with_added({token})).tokens("a <x> <x> b"),
            (Strings{"a", "<x>", "<x>", "b"}));
}

TEST(AddedTokens, SingleWordMatchesOnlyAWholeWord) {
  const TestTokenizer tokenizer(with_added({raw_token("ab", 0, "single_word")}));
  EXPECT_EQ(tokenizer.tokens("ab cab abc ab"),
            (Strings{"ab", " ", "c", "a", "b", " ", "a", "b", "c", " ", "ab"}));
  EXPECT_EQ(tokenizer.tokens("ab,ab"), (Strings{"ab", "ab"}));  // punctuation is a boundary
}

// The tokenizers test the neighbours with the regex crate's \w (Alphabetic, marks, decimal
// digits, connector punctuation, the joiners): "_" and a combining mark touch a word, "½" does not.
TEST(AddedTokens, SingleWordBoundariesAreThoseOfTheRegexWordClass) {
  const TestTokenizer tokenizer(with_added({raw_token("ab", 0, "single_word")}));
  EXPECT_EQ(tokenizer.tokens("_ab"), (Strings{"_", "a", "b"}));
  EXPECT_EQ(tokenizer.tokens("ab_"), (Strings{"a", "b", "_"}));
  EXPECT_EQ(tokenizer.tokens("\u0301ab"), (Strings{"\u0301", "a", "b"}));
  EXPECT_EQ(tokenizer.tokens("\u00BDab"), (Strings{"\u00BD", "ab"}));
}

// transformers' split_special_tokens: special tokens are text like any other; the other added
// tokens are still found.
TEST(AddedTokens, SplitSpecialTokensTokenizesSpecialTokensAsText) {
  const Json file = with_added({added_token("<s>", added_id(0), true), raw_token("<x>", 1)});
  const TestTokenizer splitting(file, {{"split_special_tokens", true}});
  EXPECT_EQ(splitting.tokens("a<s><x>"), (Strings{"a", "<", "s", ">", "<x>"}));
  const TestTokenizer matching(file, {{"split_special_tokens", false}});
  EXPECT_EQ(matching.tokens("a<s><x>"), (Strings{"a", "<s>", "<x>"}));
}

TEST(AddedTokens, RefusesATokenWithoutContent) {
  Json file = with_added({added_token("", added_id(0), true)});
  EXPECT_THAT(testing::refusal_of(file),
              ::testing::HasSubstr("the added_tokens of tests/tokenizer.json"));
}

TEST(AddedTokens, RefusesANegativeId) {
  Json file = with_added({added_token("<x>", -1, false)});
  EXPECT_THAT(testing::refusal_of(file),
              ::testing::HasSubstr("gives \"<x>\" the id -1: token ids start at 0"));
}

}  // namespace
}  // namespace strata::models::tokenizer

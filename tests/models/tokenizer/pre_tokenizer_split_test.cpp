// The Split pre-tokenizer: a pattern, each of its five behaviors, and invert. "a-b--c" shows
// every behavior's difference: a single delimiter, a run of two, none at the ends. Expected words
// are those of the Hugging Face tokenizers (the Rust library).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/models/tokenizer/tokenizer_test_util.h"

namespace strata::models::tokenizer {
namespace {

using testing::bpe_file;
using testing::cuts_into;
using ::testing::HasSubstr;
using testing::Json;
using testing::refusal_of;
using testing::vocab_of;

Json split(const Json& pattern, const char* behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}};
}

Json regex(const char* pattern) {
  return {{"Regex", pattern}};
}

Json string(const char* pattern) {
  return {{"String", pattern}};
}

TEST(SplitPreTokenizer, RemovedDropsTheMatches) {
  EXPECT_TRUE(cuts_into(split(regex("-"), "Removed"), "a-b--c", {"a", "b", "c"}));
  EXPECT_TRUE(cuts_into(split(regex("-"), "Removed"), "-a-", {"a"}));
}

TEST(SplitPreTokenizer, IsolatedMakesEachMatchAWord) {
  EXPECT_TRUE(cuts_into(split(regex("-"), "Isolated"), "a-b--c", {"a", "-", "b", "-", "-", "c"}));
}

TEST(SplitPreTokenizer, MergedWithPreviousJoinsAMatchToTheWordBefore) {
  EXPECT_TRUE(cuts_into(split(regex("-"), "MergedWithPrevious"), "a-b--c", {"a-", "b-", "-", "c"}));
  EXPECT_TRUE(cuts_into(split(regex("-"), "MergedWithPrevious"), "-a-", {"-", "a-"}));
}

TEST(SplitPreTokenizer, MergedWithNextJoinsAMatchToTheWordAfter) {
  EXPECT_TRUE(cuts_into(split(regex("-"), "MergedWithNext"), "a-b--c", {"a", "-b", "-", "-c"}));
  EXPECT_TRUE(cuts_into(split(regex("-"), "MergedWithNext"), "-a-", {"-a", "-"}));
}

TEST(SplitPreTokenizer, ContiguousJoinsAdjacentMatches) {
  EXPECT_TRUE(cuts_into(split(regex("-"), "Contiguous"), "a-b--c", {"a", "-", "b", "--", "c"}));
}

// A String pattern is literal and matches without overlap: "----" is two matches of "--".
TEST(SplitPreTokenizer, AStringPatternUnderEachBehavior) {
  const char* text = "a--b-c----d";
  EXPECT_TRUE(cuts_into(split(string("--"), "Removed"), text, {"a", "b-c", "d"}));
  EXPECT_TRUE(
      cuts_into(split(string("--"), "Isolated"), text, {"a", "--", "b-c", "--", "--", "d"}));
  EXPECT_TRUE(
      cuts_into(split(string("--"), "MergedWithPrevious"), text, {"a--", "b-c--", "--", "d"}));
  EXPECT_TRUE(cuts_into(split(string("--"), "MergedWithNext"), text, {"a", "--b-c", "--", "--d"}));
  EXPECT_TRUE(cuts_into(split(string("--"), "Contiguous"), text, {"a", "--", "b-c", "----", "d"}));
  EXPECT_TRUE(cuts_into(split(string("."), "Removed"), "a.b,c", {"a", "b,c"}));  // not "any"
}

// invert: the text between matches is what the behavior acts on.
TEST(SplitPreTokenizer, InvertSwapsMatchesAndTheTextBetween) {
  EXPECT_TRUE(cuts_into(split(regex("-"), "Removed", true), "a-b--c", {"-", "-", "-"}));
  EXPECT_TRUE(cuts_into(split(regex("[a-z]+"), "Removed", true), "ab, cd!", {"ab", "cd"}));
  EXPECT_TRUE(
      cuts_into(split(regex("-"), "MergedWithPrevious", true), "a-b--c", {"a", "-b", "-", "-c"}));
  EXPECT_TRUE(
      cuts_into(split(regex("-"), "MergedWithNext", true), "a-b--c", {"a-", "b-", "-", "c"}));
  EXPECT_TRUE(
      cuts_into(split(regex("-"), "Isolated", true), "a-b--c", {"a", "-", "b", "-", "-", "c"}));
}

// A pattern that can match nothing: the tokenizers' regex (Oniguruma) skips an empty match that
// starts where the previous match ended, so "a*" matches "aab" at [0, 2) and [3, 3), not at
// [2, 2). The behaviors that join matches to neighbours see the difference.
TEST(SplitPreTokenizer, EmptyMatchesUnderEachBehavior) {
  EXPECT_TRUE(cuts_into(split(regex("a*"), "Removed"), "bab", {"b", "b"}));
  EXPECT_TRUE(cuts_into(split(regex("a*"), "Isolated"), "bab", {"b", "a", "b"}));
  EXPECT_TRUE(cuts_into(split(regex("a*"), "MergedWithPrevious"), "baa", {"baa"}));
  EXPECT_TRUE(cuts_into(split(regex("a*"), "Contiguous"), "aab", {"aa", "b"}));
}

// An empty match right after a match is skipped, as Oniguruma's find_iter skips it: "aa" then
// "b" merge as one piece under MergedWithNext.
TEST(SplitPreTokenizer, AnEmptyMatchRightAfterAMatchIsSkipped) {
  EXPECT_TRUE(cuts_into(split(regex("a*"), "MergedWithNext"), "aab", {"aab"}));
  EXPECT_TRUE(cuts_into(split(regex("a*"), "MergedWithNext"), "bab", {"b", "ab"}));
}

TEST(SplitPreTokenizer, RefusesAnUnknownBehavior) {
  Json file = bpe_file(vocab_of({"a"}));
  file["pre_tokenizer"] = split(regex("-"), "Dropped");
  EXPECT_THAT(refusal_of(file),
              HasSubstr("the pre_tokenizer of tests/tokenizer.json: \"behavior\" is \"Dropped\""));
}

TEST(SplitPreTokenizer, RefusesAPatternOfNeitherKind) {
  Json file = bpe_file(vocab_of({"a"}));
  file["pre_tokenizer"] = split({{"Glob", "*"}}, "Removed");
  EXPECT_THAT(refusal_of(file),
              HasSubstr("the pre_tokenizer of tests/tokenizer.json: \"pattern\" is"));
}

}  // namespace
}  // namespace strata::models::tokenizer

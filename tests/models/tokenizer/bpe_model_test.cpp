// The BPE model: merges applied by rank, the options that change how a word starts (byte
// fallback, unk, subword prefix and suffix) and the files it refuses. With no pre-tokenizer the
// whole text is one word, so each expectation is the model's own work. Expected tokens are those
// of the Hugging Face tokenizers (the Rust library).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/models/tokenizer/tokenizer_test_util.h"

namespace strata::models::tokenizer {
namespace {

using ::testing::AllOf;
using testing::bpe_file;
using ::testing::HasSubstr;
using testing::Json;
using testing::refusal_of;
using testing::refused_type;
using testing::Strings;
using testing::TestTokenizer;
using testing::vocab_of;

TEST(BpeModel, MergesAsStringsOrAsPairsGiveTheSameTokens) {
  const Json vocab = vocab_of({"a", "b", "c", "ab", "abc"});
  const TestTokenizer strings(bpe_file(vocab, {"a b", "ab c"}));
  const TestTokenizer pairs(bpe_file(vocab, Json::array({{"a", "b"}, {"ab", "c"}})));
  EXPECT_EQ(strings.tokens("abcab"), (Strings{"abc", "ab"}));
  EXPECT_EQ(pairs.tokens("abcab"), (Strings{"abc", "ab"}));
  EXPECT_EQ(strings.ids("cab"), pairs.ids("cab"));
}

// Only the pair form can name a token holding a space, as byte-level files without a
// pre-tokenizer need.
TEST(BpeModel, PairMergesMayNameTokensHoldingASpace) {
  const TestTokenizer tokenizer(
      bpe_file(vocab_of({"a", " ", "b", "a ", "a b"}), Json::array({{"a", " "}, {"a ", "b"}})));
  EXPECT_EQ(tokenizer.tokens("a ba"), (Strings{"a b", "a"}));
}

TEST(BpeModel, TheLowestRankedMergeRunsFirst) {
  const Json vocab = vocab_of({"a", "b", "c", "ab", "bc"});
  EXPECT_EQ(TestTokenizer(bpe_file(vocab, {"b c", "a b"})).tokens("abc"), (Strings{"a", "bc"}));
  EXPECT_EQ(TestTokenizer(bpe_file(vocab, {"a b", "b c"})).tokens("abc"), (Strings{"ab", "c"}));
}

// "aaa" holds the pair "a a" twice with the same rank: the leftmost merges, and the "a" left over
// cannot merge with the "aa" it made.
TEST(BpeModel, AmongEqualRanksTheLeftmostPairMerges) {
  const TestTokenizer tokenizer(bpe_file(vocab_of({"a", "aa"}), {"a a"}));
  EXPECT_EQ(tokenizer.tokens("aaa"), (Strings{"aa", "a"}));
  EXPECT_EQ(tokenizer.tokens("aaaaa"), (Strings{"aa", "aa", "a"}));
}

// A merge made from merges' results: "abcab" needs "abc" and "ab" first. In "abcabc" both "ab"
// merge into "abc" before "abc ab" could take the second: merges apply in rank order, not
// greedily left to right.
TEST(BpeModel, MergesBuildOnEarlierMerges) {
  const TestTokenizer tokenizer(
      bpe_file(vocab_of({"a", "b", "c", "ab", "abc", "abcab"}), {"a b", "ab c", "abc ab"}));
  EXPECT_EQ(tokenizer.tokens("abcab"), (Strings{"abcab"}));
  EXPECT_EQ(tokenizer.tokens("abcabc"), (Strings{"abc", "abc"}));
}

// ignore_merges (Llama 3's files set it): a word the vocabulary holds is one token even where the
// merges would have cut it otherwise.
TEST(BpeModel, IgnoreMergesTakesAWordInTheVocabularyWhole) {
  Json file = bpe_file(vocab_of({"a", "b", "c", "ab", "abc"}), {"a b"});
  EXPECT_EQ(TestTokenizer(file).tokens("abc"), (Strings{"ab", "c"}));
  file["model"]["ignore_merges"] = true;
  const TestTokenizer ignoring(file);
  EXPECT_EQ(ignoring.tokens("abc"), (Strings{"abc"}));
  EXPECT_EQ(ignoring.tokens("abcc"), (Strings{"ab", "c", "c"}));  // not in the vocabulary: merged
}

TEST(BpeModel, ByteFallbackSpellsAnUnknownCharacterAsItsBytes) {
  Json file = bpe_file(vocab_of({"<unk>", "a", "<0xC3>", "<0xA9>", "<0x82>", "<0xAC>"}));
  file["model"]["unk_token"] = "<unk>";
  file["model"]["byte_fallback"] = true;
  const TestTokenizer tokenizer(file);
  EXPECT_EQ(tokenizer.tokens("a\u00E9"), (Strings{"a", "<0xC3>", "<0xA9>"}));  // é
  // "€" is E2 82 AC, and the vocabulary has no <0xE2>: the character is unknown instead.
  EXPECT_EQ(tokenizer.tokens("a\u20AC"), (Strings{"a", "<unk>"}));
  file["model"]["byte_fallback"] = false;
  EXPECT_EQ(TestTokenizer(file).tokens("a\u00E9"), (Strings{"a", "<unk>"}));
}

TEST(BpeModel, FuseUnkMakesARunOfUnknownCharactersOneUnk) {
  Json file = bpe_file(vocab_of({"<unk>", "a"}));
  file["model"]["unk_token"] = "<unk>";
  file["model"]["fuse_unk"] = true;
  EXPECT_EQ(TestTokenizer(file).tokens("axya"), (Strings{"a", "<unk>", "a"}));
  EXPECT_EQ(TestTokenizer(file).tokens("xy"), (Strings{"<unk>"}));
  file["model"]["fuse_unk"] = false;
  EXPECT_EQ(TestTokenizer(file).tokens("axya"), (Strings{"a", "<unk>", "<unk>", "a"}));
}

// The tokenizers drop a character they have no token for when there is no unk_token.
TEST(BpeModel, WithoutUnkAnUnknownCharacterIsDropped) {
  const TestTokenizer tokenizer(bpe_file(vocab_of({"<unk>", "a"})));
  EXPECT_EQ(tokenizer.tokens("axya"), (Strings{"a", "a"}));
}

// continuing_subword_prefix: every character but a word's first is looked up after "##", and a
// merge's result drops its right side's "##" ("h" + "##e" makes "he").
TEST(BpeModel, ContinuingSubwordPrefixMarksCharactersInsideAWord) {
  Json file = bpe_file(vocab_of({"h", "##e", "##y", "he", "hey", "e", "y"}), {"h ##e", "he ##y"});
  file["model"]["continuing_subword_prefix"] = "##";
  const TestTokenizer tokenizer(file);
  EXPECT_EQ(tokenizer.tokens("hey"), (Strings{"hey"}));
  EXPECT_EQ(tokenizer.tokens("hye"), (Strings{"h", "##y", "##e"}));
  EXPECT_EQ(tokenizer.tokens("ye"), (Strings{"y", "##e"}));
}

// end_of_word_suffix: a word's last character is looked up with "</w>" after it.
TEST(BpeModel, EndOfWordSuffixMarksAWordsLastCharacter) {
  Json file = bpe_file(vocab_of({"a", "b", "a</w>", "b</w>", "ab</w>"}), {"a b</w>"});
  file["model"]["end_of_word_suffix"] = "</w>";
  const TestTokenizer tokenizer(file);
  EXPECT_EQ(tokenizer.tokens("ab"), (Strings{"ab</w>"}));
  EXPECT_EQ(tokenizer.tokens("ba"), (Strings{"b", "a</w>"}));
  EXPECT_EQ(tokenizer.tokens("aab"), (Strings{"a", "ab</w>"}));
}

TEST(BpeModel, RefusesAMergeOfATokenNotInTheVocabulary) {
  EXPECT_THAT(refusal_of(bpe_file(vocab_of({"a", "b"}), {"a c"})),
              AllOf(HasSubstr("the model of tests/tokenizer.json"), HasSubstr("merges"),
                    HasSubstr("\"c\", which is not in the vocabulary")));
  // The merge's result must be a token too: the Rust library panics on this file.
  EXPECT_THAT(refusal_of(bpe_file(vocab_of({"a", "b"}), {"a b"})),
              AllOf(HasSubstr("the model of tests/tokenizer.json"),
                    HasSubstr("\"ab\", which is not in the vocabulary")));
}

// Dropout skips merges at random, so the same text would get different ids each time.
TEST(BpeModel, RefusesDropout) {
  Json file = bpe_file(vocab_of({"a", "b"}));
  file["model"]["dropout"] = 0.1;
  EXPECT_THAT(refusal_of(file),
              AllOf(HasSubstr("the model of tests/tokenizer.json"), HasSubstr("\"dropout\"")));
  file["model"]["dropout"] = 0.0;  // as good as none
  EXPECT_EQ(refusal_of(file), "no refusal");
}

TEST(BpeModel, RefusesAModelOfAnotherType) {
  for (const char* type : {"WordPiece", "Unigram", "WordLevel"}) {
    Json file = bpe_file(vocab_of({"a"}));
    file["model"]["type"] = type;
    EXPECT_THAT(refusal_of(file), HasSubstr(refused_type("model", type)));
  }
}

// The Rust library fails only when an unknown character needs the unk; refusing the file at load
// names the problem before any text is encoded.
TEST(BpeModel, RefusesAnUnkTokenNotInTheVocabulary) {
  Json file = bpe_file(vocab_of({"a"}));
  file["model"]["unk_token"] = "<unk>";
  EXPECT_THAT(refusal_of(file),
              AllOf(HasSubstr("the model of tests/tokenizer.json"), HasSubstr("\"unk_token\"")));
}

}  // namespace
}  // namespace strata::models::tokenizer

// The pre-tokenizers other than Split (pre_tokenizer_split_test.cpp): where each cuts the text
// into words and how it rewrites them, seen through the tokens the model makes of each word
// (cuts_into). Expected words are those of the Hugging Face tokenizers (the Rust library).
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
using testing::refused_type;
using testing::Strings;
using testing::TestTokenizer;
using testing::vocab_of;

Json byte_level(bool add_prefix_space, bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

Json metaspace(const char* prepend_scheme, bool split) {
  return {{"type", "Metaspace"},
          {"replacement", "\u2581"},
          {"prepend_scheme", prepend_scheme},
          {"split", split}};
}

// Words come out in GPT-2's byte alphabet: a space is "Ġ", a newline "Ċ", é's two bytes "Ã©".
TEST(ByteLevelPreTokenizer, CutsWithTheGpt2RegexAndMapsBytes) {
  const Json pre_tokenizer = byte_level(false, true);
  EXPECT_TRUE(cuts_into(pre_tokenizer, "Hello world!", {"Hello", "\u0120world", "!"}));
  // Contractions are words; of a run of spaces the last joins the next word.
  EXPECT_TRUE(cuts_into(pre_tokenizer, "I'm  ok\n", {"I", "'m", "\u0120", "\u0120ok", "\u010A"}));
  EXPECT_TRUE(cuts_into(pre_tokenizer, "\u00E9", {"\u00C3\u00A9"}));
  // A no-break space is white space to the regex but not a space: its bytes C2 A0 map to "Âł".
  EXPECT_TRUE(cuts_into(pre_tokenizer, "a\u00A0b", {"a", "\u00C2\u0142", "b"}));
}

TEST(ByteLevelPreTokenizer, AddPrefixSpaceGivesTheFirstWordASpace) {
  const Json pre_tokenizer = byte_level(true, true);
  EXPECT_TRUE(cuts_into(pre_tokenizer, "Hello world", {"\u0120Hello", "\u0120world"}));
  EXPECT_TRUE(cuts_into(pre_tokenizer, " Hello", {"\u0120Hello"}));  // it has one already
}

// The tokenizers add the space to every piece between added tokens, not only the first.
TEST(ByteLevelPreTokenizer, AddPrefixSpaceAppliesAfterAnAddedTokenToo) {
  EXPECT_TRUE(cuts_into(byte_level(true, true), "a<x>b", {"\u0120a", "<x>", "\u0120b"}, {"<x>"}));
}

TEST(ByteLevelPreTokenizer, WithoutTheRegexTheTextIsOneWord) {
  EXPECT_TRUE(cuts_into(byte_level(false, false), "Hello world", {"Hello\u0120world"}));
  EXPECT_TRUE(cuts_into(byte_level(true, false), "Hello world", {"\u0120Hello\u0120world"}));
}

TEST(MetaspacePreTokenizer, AlwaysPrependsAndSplitsBeforeEachReplacement) {
  EXPECT_TRUE(cuts_into(metaspace("always", true), "hello world", {"\u2581hello", "\u2581world"}));
  EXPECT_TRUE(cuts_into(metaspace("always", true), "a  b", {"\u2581a", "\u2581", "\u2581b"}));
  // A text starting with a space gets no second "▁".
  EXPECT_TRUE(cuts_into(metaspace("always", true), " hi", {"\u2581hi"}));
}

TEST(MetaspacePreTokenizer, WithoutSplitTheTextIsOneWord) {
  EXPECT_TRUE(cuts_into(metaspace("always", false), "hello world", {"\u2581hello\u2581world"}));
  EXPECT_TRUE(cuts_into(metaspace("never", false), "hello world", {"hello\u2581world"}));
  EXPECT_TRUE(cuts_into(metaspace("first", false), "hello world", {"\u2581hello\u2581world"}));
}

TEST(MetaspacePreTokenizer, NeverPrepends) {
  EXPECT_TRUE(cuts_into(metaspace("never", true), "hello world", {"hello", "\u2581world"}));
}

// "always" prepends to each piece between added tokens; "first" only to the piece that starts
// the input, so that text after a special token (a chat template's) gets no "▁".
TEST(MetaspacePreTokenizer, FirstPrependsOnlyAtTheStartOfTheInput) {
  EXPECT_TRUE(
      cuts_into(metaspace("always", true), "hi<x>yo", {"\u2581hi", "<x>", "\u2581yo"}, {"<x>"}));
  EXPECT_TRUE(cuts_into(metaspace("first", true), "hi<x>yo", {"\u2581hi", "<x>", "yo"}, {"<x>"}));
  EXPECT_TRUE(cuts_into(metaspace("first", true), "<x>hi", {"<x>", "hi"}, {"<x>"}));
  EXPECT_TRUE(cuts_into(metaspace("first", true), "hi yo", {"\u2581hi", "\u2581yo"}));
}

// Files written before prepend_scheme existed say add_prefix_space: false for "never".
TEST(MetaspacePreTokenizer, OldFilesSayAddPrefixSpace) {
  const Json pre_tokenizer = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", false}};
  EXPECT_TRUE(cuts_into(pre_tokenizer, "hello world", {"hello", "\u2581world"}));
}

TEST(DigitsPreTokenizer, KeepsRunsOfDigitsTogetherOrApart) {
  const Json together = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_TRUE(cuts_into(together, "a123b45", {"a", "123", "b", "45"}));
  // Any numeric character counts: these are Arabic-Indic one and two.
  EXPECT_TRUE(cuts_into(together, "x\u0661\u0662", {"x", "\u0661\u0662"}));
  const Json apart = {{"type", "Digits"}, {"individual_digits", true}};
  EXPECT_TRUE(cuts_into(apart, "a123b45", {"a", "1", "2", "3", "b", "4", "5"}));
}

TEST(PunctuationPreTokenizer, IsolatesEachPunctuationCharacter) {
  const Json punctuation = {{"type", "Punctuation"}, {"behavior", "Isolated"}};
  EXPECT_TRUE(cuts_into(punctuation, "hi, there!?", {"hi", ",", " there", "!", "?"}));
  // ASCII symbols count as punctuation, as do Unicode's P* categories (« and »).
  EXPECT_TRUE(cuts_into(punctuation, "a+b$", {"a", "+", "b", "$"}));
  EXPECT_TRUE(cuts_into(punctuation, "\u00ABx\u00BB", {"\u00AB", "x", "\u00BB"}));
  // Isolated is the default.
  EXPECT_TRUE(cuts_into({{"type", "Punctuation"}}, "hi, there!?", {"hi", ",", " there", "!", "?"}));
}

TEST(PunctuationPreTokenizer, TakesAnotherBehavior) {
  const Json contiguous = {{"type", "Punctuation"}, {"behavior", "Contiguous"}};
  EXPECT_TRUE(cuts_into(contiguous, "hi, there!?", {"hi", ",", " there", "!?"}));
}

// Whitespace keeps runs of word characters and runs of other non-space characters.
TEST(WhitespacePreTokenizer, KeepsWordsAndRunsOfSymbols) {
  const Json whitespace = {{"type", "Whitespace"}};
  EXPECT_TRUE(cuts_into(whitespace, "Hello, world!  ok", {"Hello", ",", "world", "!", "ok"}));
  EXPECT_TRUE(cuts_into(whitespace, "caf\u00E9-au lait", {"caf\u00E9", "-", "au", "lait"}));
  EXPECT_TRUE(cuts_into(whitespace, "x_y z", {"x_y", "z"}));  // "_" is a word character
}

// The tokenizers run Whitespace's regex on Rust's regex crate, whose \w is Alphabetic (the
// letter number Ⅻ included), marks, decimal digits, connector punctuation and the joiners:
// U+200D is a word of its own inside an emoji sequence, and joins "a" to "b".
TEST(WhitespacePreTokenizer, WordCharactersAreThoseOfRustsRegexCrate) {
  const Json whitespace = {{"type", "Whitespace"}};
  EXPECT_TRUE(cuts_into(whitespace, "a\u216Bb c", {"a\u216Bb", "c"}));
  EXPECT_TRUE(cuts_into(whitespace, "a\u200Db", {"a\u200Db"}));
  EXPECT_TRUE(
      cuts_into(whitespace, "\U0001F468\u200D\U0001F469", {"\U0001F468", "\u200D", "\U0001F469"}));
}

TEST(WhitespaceSplitPreTokenizer, CutsAtAnyWhiteSpace) {
  EXPECT_TRUE(cuts_into({{"type", "WhitespaceSplit"}}, "a  b\tc\u3000d ", {"a", "b", "c", "d"}));
}

TEST(SequencePreTokenizer, EachStepCutsTheWordsOfTheStepBefore) {
  const Json split_then_digits = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "WhitespaceSplit"}}, {{"type", "Digits"}, {"individual_digits", true}}}}};
  EXPECT_TRUE(cuts_into(split_then_digits, "ab12 c3", {"ab", "1", "2", "c", "3"}));
  // Llama 3's shape: a Split by regex, then ByteLevel without its own regex.
  const Json split_then_bytes = {{"type", "Sequence"},
                                 {"pretokenizers",
                                  {{{"type", "Split"},
                                    {"pattern", {{"Regex", "\\p{N}{1,3}"}}},
                                    {"behavior", "Isolated"},
                                    {"invert", false}},
                                   byte_level(false, false)}}};
  EXPECT_TRUE(cuts_into(split_then_bytes, "1234 \u00E9", {"123", "4", "\u0120\u00C3\u00A9"}));
}

TEST(PreTokenizer, RefusesATypeItDoesNotImplement) {
  for (const char* type : {"BertPreTokenizer", "CharDelimiterSplit", "UnicodeScripts"}) {
    Json file = bpe_file(vocab_of({"a"}));
    file["pre_tokenizer"] = {{"type", type}};
    EXPECT_THAT(refusal_of(file), HasSubstr(refused_type("pre_tokenizer", type)));
  }
}

TEST(PreTokenizer, RefusesAnUnknownPrependScheme) {
  Json file = bpe_file(vocab_of({"a"}));
  file["pre_tokenizer"] = metaspace("sometimes", true);
  EXPECT_THAT(refusal_of(file), HasSubstr("the pre_tokenizer of tests/tokenizer.json: "
                                          "\"prepend_scheme\" is \"sometimes\""));
}

}  // namespace
}  // namespace strata::models::tokenizer

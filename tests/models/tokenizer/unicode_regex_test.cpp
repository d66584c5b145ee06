// The regexes of tokenizer files, run through a Split pre-tokenizer that isolates each match.
// The files are written for Oniguruma, which the Hugging Face tokenizers run them on; strata
// runs them on PCRE2, so these pin the constructs real files use to Oniguruma's meaning (expected
// words are those of the Rust library).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/models/tokenizer/tokenizer_test_util.h"

namespace strata::models::tokenizer {
namespace {

using ::testing::AllOf;
using testing::bpe_file;
using testing::cuts_into;
using ::testing::HasSubstr;
using testing::Json;
using testing::refusal_of;
using testing::vocab_of;

Json isolating(const char* pattern) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", pattern}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

TEST(UnicodeRegex, LetterClassTakesLettersOfEveryScript) {
  EXPECT_TRUE(cuts_into(isolating("\\p{L}+"), "h\u00E9llo, \u043C\u0438\u0440 42",
                        {"h\u00E9llo", ", ", "\u043C\u0438\u0440", " 42"}));
  EXPECT_TRUE(cuts_into(isolating("\\p{Lu}\\p{Ll}+"), "HelloWorld", {"Hello", "World"}));
}

TEST(UnicodeRegex, NumberClassTakesDigitsOfEveryScript) {
  // Arabic-Indic one and two, then an ASCII three.
  EXPECT_TRUE(cuts_into(isolating("\\p{N}+"), "x\u0661\u06623y", {"x", "\u0661\u06623", "y"}));
  EXPECT_TRUE(cuts_into(isolating("\\p{N}+"), "\u00BD", {"\u00BD"}));  // ½ is a number too
  EXPECT_TRUE(cuts_into(isolating("\\d+"), "a\u0661\u0662b", {"a", "\u0661\u0662", "b"}));
}

// GPT-2's "\s+(?!\S)|\s+": of a run of spaces before a word, all but the last are one match, so
// that the last can lead the word.
TEST(UnicodeRegex, NegativeLookaheadLeavesTheLastSpace) {
  const Json pre_tokenizer = isolating("\\s+(?!\\S)|\\s+");
  EXPECT_TRUE(cuts_into(pre_tokenizer, "a   b", {"a", "  ", " ", "b"}));
  EXPECT_TRUE(cuts_into(pre_tokenizer, "a  ", {"a", "  "}));  // at the end, all of them
  EXPECT_TRUE(cuts_into(pre_tokenizer, "a\t\n b", {"a", "\t\n", " ", "b"}));
}

// Llama 3's "(?i:'s|'t|...)": case-insensitive inside the group only.
TEST(UnicodeRegex, ScopedCaseInsensitiveGroup) {
  EXPECT_TRUE(cuts_into(isolating("(?i:'s|'t)|\\p{L}+"), "IT'S", {"IT", "'S"}));
  EXPECT_TRUE(
      cuts_into(isolating("(?i:'s|'t)|\\p{L}+"), "it's don'T", {"it", "'s", " ", "don", "'T"}));
  EXPECT_TRUE(cuts_into(isolating("'s|\\p{L}+"), "IT'S", {"IT", "'", "S"}));  // outside: exact
  EXPECT_TRUE(cuts_into(isolating("(?i)ab"), "xABy", {"x", "AB", "y"}));
}

// Oniguruma's \s includes U+0085 (NEL), which PCRE2's does not; a no-break space and an em space
// are white space to both.
TEST(UnicodeRegex, WhiteSpaceClassIncludesNextLine) {
  const Json removing = {{"type", "Split"},
                         {"pattern", {{"Regex", "\\s+"}}},
                         {"behavior", "Removed"},
                         {"invert", false}};
  EXPECT_TRUE(cuts_into(removing, "a\u0085b", {"a", "b"}));
  EXPECT_TRUE(cuts_into(removing, "a\u00A0b\u2003c", {"a", "b", "c"}));
}

// Oniguruma's \w: letters, marks, decimal digits and connector punctuation ("_"). Inside a
// bracket class it leaves out the other numbers, such as ½.
TEST(UnicodeRegex, WordClassIncludesMarksAndUnderscore) {
  EXPECT_TRUE(cuts_into(isolating("\\w+"), "e\u0301t\u00E9_x-y", {"e\u0301t\u00E9_x", "-", "y"}));
  EXPECT_TRUE(cuts_into(isolating("[^\\s\\p{L}\\p{N}]+"), "a,.b", {"a", ",.", "b"}));
  EXPECT_TRUE(cuts_into(isolating("[\\w]+"), "a\u00BDb", {"a", "\u00BD", "b"}));
}

// Outside a class Oniguruma's \w takes every number, ½ (No) and Ⅻ (Nl) included; inside one it
// takes Ⅻ but not ½. (\W inside a class keeps PCRE2's meaning: docs/tokenizer.md.)
TEST(UnicodeRegex, WordClassTakesOnigurumasNumbersAndMarks) {
  EXPECT_TRUE(cuts_into(isolating("\\w+"), "a\u00BDb", {"a\u00BDb"}));
  EXPECT_TRUE(cuts_into(isolating("\\w+"), "a\u216Bb", {"a\u216Bb"}));
  EXPECT_TRUE(cuts_into(isolating("\\W+"), "a\u00B2b", {"a\u00B2b"}));  // no match: ² is \w
  EXPECT_TRUE(cuts_into(isolating("[\\w]+"), "a\u216Bb", {"a\u216Bb"}));
}

TEST(UnicodeRegex, RefusesAPatternThatDoesNotCompile) {
  Json file = bpe_file(vocab_of({"a"}));
  file["pre_tokenizer"] = isolating("[a");
  EXPECT_THAT(refusal_of(file), AllOf(HasSubstr("the pre_tokenizer of tests/tokenizer.json"),
                                      HasSubstr("the regex \"[a\" does not compile")));
}

}  // namespace
}  // namespace strata::models::tokenizer

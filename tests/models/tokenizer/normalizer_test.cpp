// The normalizers, each seen through the text the model receives (normalizes_to). Expected texts
// are those of the Hugging Face tokenizers (the Rust library).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/models/tokenizer/tokenizer_test_util.h"

namespace strata::models::tokenizer {
namespace {

using testing::bpe_file;
using ::testing::HasSubstr;
using testing::Json;
using testing::normalizes_to;
using testing::refusal_of;
using testing::refused_type;
using testing::vocab_of;

Json of_type(const char* type) {
  return {{"type", type}};
}

TEST(Normalizer, NfcComposes) {
  EXPECT_TRUE(normalizes_to(of_type("NFC"), "e\u0301", "\u00E9"));  // e + combining acute: é
  EXPECT_TRUE(normalizes_to(of_type("NFC"), "\u212B", "\u00C5"));   // the Ångström sign: Å
  // Compatibility forms are NFKC's business, not NFC's.
  EXPECT_TRUE(normalizes_to(of_type("NFC"), "\uFB01", "\uFB01"));  // the "fi" ligature
}

TEST(Normalizer, NfdDecomposes) {
  EXPECT_TRUE(normalizes_to(of_type("NFD"), "\u00E9", "e\u0301"));
}

TEST(Normalizer, NfkcFoldsCompatibilityForms) {
  EXPECT_TRUE(normalizes_to(of_type("NFKC"), "\uFB01", "fi"));
  EXPECT_TRUE(normalizes_to(of_type("NFKC"), "\uFF11\uFF12", "12"));  // fullwidth digits
  EXPECT_TRUE(normalizes_to(of_type("NFKC"), "e\u0301", "\u00E9"));
}

TEST(Normalizer, NfkdFoldsAndDecomposes) {
  EXPECT_TRUE(normalizes_to(of_type("NFKD"), "\uFB01\u00E9", "fie\u0301"));
}

TEST(Normalizer, PrependPutsItsTextBeforeTheText) {
  const Json prepend = {{"type", "Prepend"}, {"prepend", "\u2581"}};
  EXPECT_TRUE(normalizes_to(prepend, "ab", "\u2581ab"));
}

// The tokenizers' Prepend leaves an empty text empty, so "" encodes to no ids at all.
TEST(Normalizer, PrependLeavesAnEmptyTextEmpty) {
  Json file = bpe_file(vocab_of({"\u2581", "a"}));
  file["normalizer"] = {{"type", "Prepend"}, {"prepend", "\u2581"}};
  EXPECT_TRUE(testing::TestTokenizer(file).ids("").empty());
}

TEST(Normalizer, ReplaceAString) {
  const Json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
  EXPECT_TRUE(normalizes_to(replace, "a b  c", "a\u2581b\u2581\u2581c"));
  // A string pattern is literal: "." is a full stop, not any character.
  const Json dot = {{"type", "Replace"}, {"pattern", {{"String", "."}}}, {"content", "!"}};
  EXPECT_TRUE(normalizes_to(dot, "a.b", "a!b"));
}

TEST(Normalizer, ReplaceARegex) {
  const Json replace = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "_"}};
  EXPECT_TRUE(normalizes_to(replace, "a  b c", "a_b_c"));
}

TEST(Normalizer, StripTakesWhiteSpaceFromTheChosenEnds) {
  const auto strip = [](bool left, bool right) {
    return Json{{"type", "Strip"}, {"strip_left", left}, {"strip_right", right}};
  };
  EXPECT_TRUE(normalizes_to(strip(true, false), "  ab  ", "ab  "));
  // Unicode white space counts: U+3000 is the ideographic space.
  EXPECT_TRUE(normalizes_to(strip(false, true), "  ab \u3000", "  ab"));
  EXPECT_TRUE(normalizes_to(strip(true, true), "\t ab \n", "ab"));
}

TEST(Normalizer, LowercaseMapsEachCharacterAlone) {
  EXPECT_TRUE(normalizes_to(of_type("Lowercase"), "AbC\u00C0\u00C9", "abc\u00E0\u00E9"));
  // İ has the one lowercase mapping to two characters: i and a combining dot above.
  EXPECT_TRUE(normalizes_to(of_type("Lowercase"), "\u0130", "i\u0307"));
  // Character by character, as Rust's char::to_lowercase: a final capital sigma becomes σ, not
  // the final form ς that str::to_lowercase would give.
  EXPECT_TRUE(
      normalizes_to(of_type("Lowercase"), "\u039F\u0394\u039F\u03A3", "\u03BF\u03B4\u03BF\u03C3"));
}

TEST(Normalizer, SequenceRunsItsNormalizersInOrder) {
  const Json sequence = {
      {"type", "Sequence"},
      {"normalizers",
       {of_type("NFKC"),
        of_type("Lowercase"),
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}},
        {{"type", "Prepend"}, {"prepend", "\u2581"}}}}};
  // Fullwidth capitals: NFKC makes them ASCII before Lowercase sees them.
  EXPECT_TRUE(normalizes_to(sequence, "\uFF21\uFF22 \uFF23", "\u2581ab\u2581c"));
}

TEST(Normalizer, RefusesATypeItDoesNotImplement) {
  for (const char* type : {"BertNormalizer", "Precompiled", "StripAccents", "Nmt"}) {
    Json file = bpe_file(vocab_of({"a"}));
    file["normalizer"] = of_type(type);
    EXPECT_THAT(refusal_of(file), HasSubstr(refused_type("normalizer", type)));
  }
}

TEST(Normalizer, RefusesAnUnknownTypeInsideASequence) {
  Json file = bpe_file(vocab_of({"a"}));
  file["normalizer"] = {{"type", "Sequence"},
                        {"normalizers", {of_type("NFC"), of_type("Precompiled")}}};
  EXPECT_THAT(refusal_of(file),
              HasSubstr("the normalizer of tests/tokenizer.json is of type \"Precompiled\""));
}

}  // namespace
}  // namespace strata::models::tokenizer

// Decoders: the text each makes of a list of tokens (decoded), and transformers' clean-up of
// spaces after them. Expected texts are those of the Hugging Face tokenizers (the Rust library).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/models/tokenizer/tokenizer_test_util.h"

namespace strata::models::tokenizer {
namespace {

using testing::bpe_file;
using testing::decoded;
using ::testing::HasSubstr;
using testing::Json;
using testing::refusal_of;
using testing::refused_type;
using testing::TestTokenizer;
using testing::vocab_of;

const char* const replacement_character = "\uFFFD";

Json of_type(const char* type) {
  return {{"type", type}};
}

Json replace(const Json& pattern, const char* content) {
  return {{"type", "Replace"}, {"pattern", pattern}, {"content", content}};
}

Json metaspace(const char* prepend_scheme) {
  return {{"type", "Metaspace"},
          {"replacement", "\u2581"},
          {"prepend_scheme", prepend_scheme},
          {"split", true}};
}

Json strip(const char* content, int start, int stop) {
  return {{"type", "Strip"}, {"content", content}, {"start", start}, {"stop", stop}};
}

// Llama 2's decoder.
Json llama_decoder() {
  return {{"type", "Sequence"},
          {"decoders",
           {replace({{"String", "\u2581"}}, " "), of_type("ByteFallback"), of_type("Fuse"),
            strip(" ", 1, 0)}}};
}

// "Ġ" is a space's character and "Ã©" é's two bytes in GPT-2's byte alphabet.
TEST(ByteLevelDecoder, MapsCharactersBackToBytes) {
  EXPECT_EQ(decoded(of_type("ByteLevel"), {"Hello", "\u0120w", "\u00C3\u00A9"}), "Hello w\u00E9");
  EXPECT_EQ(decoded(of_type("ByteLevel"), {"\u0120", "\u0120"}), "  ");
}

// Bytes that are not UTF-8 (a lone lead byte, or FF) become U+FFFD, as Rust's from_utf8_lossy.
TEST(ByteLevelDecoder, InvalidUtf8BecomesTheReplacementCharacter) {
  EXPECT_EQ(decoded(of_type("ByteLevel"), {"\u00C3"}), replacement_character);
  EXPECT_EQ(decoded(of_type("ByteLevel"), {"\u00FF", "a"}),
            std::string(replacement_character) + "a");
}

// A token with characters outside the alphabet (an added token) is taken as its own text.
TEST(ByteLevelDecoder, KeepsATokenOutsideTheAlphabetAsText) {
  EXPECT_EQ(decoded(of_type("ByteLevel"), {"a", "<|end|>", "\u0120b"}), "a<|end|> b");
}

TEST(ReplaceDecoder, ReplacesAStringOrARegexInEachToken) {
  EXPECT_EQ(decoded(replace({{"String", "\u2581"}}, " "), {"\u2581a", "b\u2581"}), " ab ");
  EXPECT_EQ(decoded(replace({{"Regex", "_+"}}, "-"), {"a__b", "_"}), "a-b-");
}

TEST(ByteFallbackDecoder, AValidRunOfBytesBecomesItsText) {
  const Json byte_fallback = of_type("ByteFallback");
  EXPECT_EQ(decoded(byte_fallback, {"<0xC3>", "<0xA9>", "x"}), "\u00E9x");
  EXPECT_EQ(decoded(byte_fallback, {"<0x61>", "<0x62>", "c"}), "abc");
  EXPECT_EQ(decoded(byte_fallback, {"<0xc3>", "<0xa9>"}), "\u00E9");  // lower-case hex too
  EXPECT_EQ(decoded(byte_fallback, {"<0xZZ>"}), "<0xZZ>");            // not hex: an ordinary token
}

// Unlike ByteLevel, an invalid run gives one U+FFFD per byte, not per maximal invalid subpart.
TEST(ByteFallbackDecoder, AnInvalidRunGivesOneReplacementPerByte) {
  const std::string two = std::string(replacement_character) + replacement_character;
  EXPECT_EQ(decoded(of_type("ByteFallback"), {"<0xFF>", "<0xFE>"}), two);
  EXPECT_EQ(decoded(of_type("ByteFallback"), {"<0xE2>", "<0x82>"}), two);  // an incomplete €
  EXPECT_EQ(decoded(of_type("ByteFallback"), {"<0xC3>", "x"}),
            std::string(replacement_character) + "x");
}

// Without Fuse the tokens are still joined, but with nothing between them (unlike no decoder).
TEST(FuseDecoder, JoinsTheTokens) {
  EXPECT_EQ(decoded(of_type("Fuse"), {"a", "b", " c"}), "ab c");
}

TEST(StripDecoder, StripsUpToStartAndStopCharactersOfEachToken) {
  EXPECT_EQ(decoded(strip(" ", 1, 0), {" a", "  b", "c "}), "a bc ");
  EXPECT_EQ(decoded(strip("x", 0, 2), {"axxx", "xx"}), "ax");
}

// The first token's "▁" are dropped (unless prepend_scheme is never), every other "▁" is a space.
// transformers.js drops only one leading space; the Rust library drops every "▁" of the first
// token, which strata follows.
TEST(MetaspaceDecoder, DropsTheFirstTokensReplacementCharacters) {
  EXPECT_EQ(decoded(metaspace("always"), {"\u2581a", "\u2581b"}), "a b");
  EXPECT_EQ(decoded(metaspace("always"), {"\u2581\u2581a", "\u2581b"}), "a b");
  EXPECT_EQ(decoded(metaspace("always"), {"a\u2581b"}), "ab");
  EXPECT_EQ(decoded(metaspace("first"), {"\u2581a", "\u2581b"}), "a b");
  EXPECT_EQ(decoded(metaspace("never"), {"\u2581a", "\u2581b"}), " a b");
}

TEST(BpeDecoder, TheSuffixEndsAWord) {
  const Json bpe = {{"type", "BPEDecoder"}, {"suffix", "</w>"}};
  EXPECT_EQ(decoded(bpe, {"hel", "lo</w>", "world</w>"}), "hello world");
  EXPECT_EQ(decoded(bpe, {"a</w>b</w>"}), "ab");  // the last token's suffixes are dropped
}

TEST(SequenceDecoder, RunsItsDecodersInOrder) {
  EXPECT_EQ(decoded(llama_decoder(), {"\u2581hello", "\u2581w", "<0xC3>", "<0xA9>"}),
            "hello w\u00E9");
  EXPECT_EQ(decoded(llama_decoder(), {"\u2581\u2581a"}), " a");  // Strip takes one space
}

TEST(NoDecoder, JoinsTheTokensWithSpaces) {
  EXPECT_EQ(decoded(nullptr, {"a", "b", "cd"}), "a b cd");
}

// transformers' clean_up_tokenization_spaces: no space before punctuation or in contractions.
TEST(Decode, CleanUpTokenizationSpacesJoinsPunctuation) {
  const Json file = bpe_file(vocab_of({"a", ".", "do", "n't", "it", "'s", ",", "?", "!"}));
  const TestTokenizer cleaning(file, {{"clean_up_tokenization_spaces", true}});
  EXPECT_EQ(cleaning.decode({"a", "."}), "a.");
  EXPECT_EQ(cleaning.decode({"do", "n't", ",", "it", "'s", "?", "!"}), "don't, it's?!");
  const TestTokenizer keeping(file, {{"clean_up_tokenization_spaces", false}});
  EXPECT_EQ(keeping.decode({"a", "."}), "a .");
  // decode_raw is the tokenizers' own decode, without the clean-up.
  EXPECT_EQ(cleaning.get().decode_raw(cleaning.ids_of({"a", "."}), false), "a .");
}

// The tokenizers skip ids no token has.
TEST(Decode, SkipsIdsWithoutAToken) {
  const TestTokenizer tokenizer(bpe_file(vocab_of({"a", "b"})));
  const std::vector<std::int32_t> ids = {0, 7, -1, 1};
  EXPECT_EQ(tokenizer.get().decode(ids), "a b");
}

TEST(Decoder, RefusesATypeItDoesNotImplement) {
  for (const char* type : {"WordPiece", "CTC"}) {
    Json file = bpe_file(vocab_of({"a"}));
    file["decoder"] = of_type(type);
    EXPECT_THAT(refusal_of(file), HasSubstr(refused_type("decoder", type)));
  }
}

}  // namespace
}  // namespace strata::models::tokenizer

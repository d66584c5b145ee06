// tokenizer_config.json's legacy: false for transformers' Llama tokenizers: the file's normalizer
// (Prepend "▁", spaces to "▁") gives way to a Metaspace pre-tokenizer that prepends "▁" only at
// the start of the input, and a "▁" leading the text is dropped where a special token follows
// it. Expected ids are those of transformers.js (@lenml/tokenizers), which does this as the
// Python LlamaTokenizer does; the legacy ones are also those of the Rust library.
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

// A Llama-2-shaped file. ignore_merges lets the vocabulary's words stand for merges: a word in it
// is one token, any other is spelled out, so "▁hello" and "hello" show whether a "▁" was
// prepended.
Json llama_file() {
  Json file = bpe_file(vocab_of({"<unk>", "<s>", "</s>", "\u2581", "h", "e", "l", "o", "w", "r",
                                 "d", "a", "\u2581hello", "hello", "\u2581world", "world", "<p>"}));
  file["model"]["unk_token"] = "<unk>";
  file["model"]["ignore_merges"] = true;
  file["model"]["fuse_unk"] = true;
  file["added_tokens"] = {added_token("<unk>", 0, true), added_token("<s>", 1, true),
                          added_token("</s>", 2, true)};
  file["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\u2581"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  return file;
}

Json llama_config(std::optional<bool> legacy) {
  Json config = {
      {"tokenizer_class", "LlamaTokenizer"}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
  if (legacy) config["legacy"] = *legacy;
  return config;
}

// The normalizer prepends "▁" to each piece between special tokens.
TEST(LlamaLegacy, LegacyPrependsAfterEverySpecialToken) {
  const TestTokenizer tokenizer(llama_file(), llama_config(std::nullopt));
  EXPECT_EQ(tokenizer.tokens("hello"), (Strings{"<s>", "\u2581hello"}));
  EXPECT_EQ(tokenizer.tokens("<s>hello"), (Strings{"<s>", "<s>", "\u2581hello"}));
  EXPECT_EQ(tokenizer.tokens("hello<s>world"),
            (Strings{"<s>", "\u2581hello", "<s>", "\u2581world"}));
  // legacy: true is the same.
  EXPECT_EQ(TestTokenizer(llama_file(), llama_config(true)).tokens("hello<s>world"),
            tokenizer.tokens("hello<s>world"));
}

TEST(LlamaLegacy, WithoutLegacyOnlyTheInputsStartGetsAReplacement) {
  const TestTokenizer tokenizer(llama_file(), llama_config(false));
  EXPECT_EQ(tokenizer.tokens("hello"), (Strings{"<s>", "\u2581hello"}));
  EXPECT_EQ(tokenizer.tokens("hello<s>world"), (Strings{"<s>", "\u2581hello", "<s>", "world"}));
  EXPECT_EQ(tokenizer.tokens(""), (Strings{"<s>"}));
}

// The "▁" put before "<s>hello" would be a token of its own; transformers drops it.
TEST(LlamaLegacy, WithoutLegacyNoReplacementPrecedesALeadingSpecialToken) {
  const TestTokenizer tokenizer(llama_file(), llama_config(false));
  EXPECT_EQ(tokenizer.tokens("<s>hello"), (Strings{"<s>", "<s>", "hello"}));
  EXPECT_EQ(tokenizer.tokens("<s>hello", false), (Strings{"<s>", "hello"}));
}

// Spaces still become "▁" (the Metaspace pre-tokenizer does it now, without splitting), and a
// "▁" in the input is taken as a space.
TEST(LlamaLegacy, WithoutLegacySpacesStillBecomeReplacements) {
  const TestTokenizer tokenizer(llama_file(), llama_config(false));
  EXPECT_EQ(tokenizer.tokens(" hello"),
            (Strings{"<s>", "\u2581", "\u2581", "h", "e", "l", "l", "o"}));
  EXPECT_EQ(tokenizer.tokens("a\u2581hello"),
            (Strings{"<s>", "\u2581", "a", "\u2581", "h", "e", "l", "l", "o"}));
}

// The fast class's name does the same, as transformers.js strips "Fast" from it.
TEST(LlamaLegacy, TheFastClassNameIsTheSame) {
  Json config = llama_config(false);
  config["tokenizer_class"] = "LlamaTokenizerFast";
  EXPECT_EQ(TestTokenizer(llama_file(), config).tokens("hello<s>world"),
            (Strings{"<s>", "\u2581hello", "<s>", "world"}));
}

// A non-special added token with normalized: true is found in the text the non-legacy
// pre-tokenizer sees, not in the file's dropped normalizer's output (transformers.js finds "<p>").
TEST(LlamaLegacy, WithoutLegacyNormalizedAddedTokensAreStillFound) {
  Json file = llama_file();
  file["added_tokens"].push_back(added_token("<p>", 16, false));
  const TestTokenizer tokenizer(file, llama_config(false));
  EXPECT_EQ(tokenizer.tokens("a<p>hello"), (Strings{"<s>", "\u2581", "a", "<p>", "hello"}));
}

}  // namespace
}  // namespace strata::models::tokenizer

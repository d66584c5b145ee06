// Generated ids made text as they come: an unfinished UTF-8 character waits for its last byte,
// through a tokenizer's stream or as bytes, and special tokens add no text.
#include "models/generate/token_text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/models/tiny_tokenizer.h"

namespace strata::models::generate {
namespace {

constexpr IdsToText kBytes{.tokenizer = nullptr, .bytes = true};

TEST(TokenText, BytesOfAnUnfinishedCharacterWaitForTheRest) {
  TokenText text(kBytes);
  EXPECT_EQ(text.add('a'), "a");
  EXPECT_EQ(text.add(0xE2), "a");  // the first of the three bytes of U+20AC
  EXPECT_EQ(text.add(0x82), "a");
  EXPECT_EQ(text.add(0xAC), "a\u20AC");
  EXPECT_EQ(text.add(0xFF), "a\u20AC\uFFFD");  // no character starts with 0xFF
  EXPECT_EQ(text.add(300), "a\u20AC\uFFFD");   // no byte: nothing
}

TEST(TokenText, ThroughATokenizerItIsItsStreamWithoutSpecialTokens) {
  const tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::from_json_text(
      testing::tiny_tokenizer_json(testing::kTinyMerges).dump(),
      R"({"eos_token": "<|endoftext|>"})", "the tiny tokenizer");
  TokenText text(IdsToText{.tokenizer = &tokenizer});
  std::vector<std::int32_t> ids = tokenizer.encode("hello, w\u00f6rld");
  ids.push_back(*tokenizer.eos_id());
  std::vector<std::string> seen;
  for (std::int32_t id : ids)
    seen.emplace_back(text.add(id));
  EXPECT_EQ(text.text(), "hello, w\u00f6rld");
  // The two bytes of U+00F6 are two ids (each byte is one, and no merge joins them), before
  // "r", "l", "d" and EOS: the text does not change at the first.
  const std::size_t first_half = ids.size() - 6;
  EXPECT_EQ(seen[first_half], seen[first_half - 1]) << "half a character was shown";
  EXPECT_EQ(seen[first_half + 1], seen[first_half - 1] + "\u00f6");
}

TEST(TokenText, WithoutATokenizerThereIsNoText) {
  TokenText text(IdsToText{});
  EXPECT_EQ(text.add('a'), "");
  EXPECT_EQ(text.text(), "");
}

}  // namespace
}  // namespace strata::models::generate

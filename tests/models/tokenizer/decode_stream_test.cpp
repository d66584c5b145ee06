// DecodeStream: text for ids arriving one at a time, as generation makes them. Each step's text
// is what the tokenizers' DecodeStream (the Rust library) returns for it, "" where it returns
// None.
#include <gtest/gtest.h>

#include "tests/models/tokenizer/tokenizer_test_util.h"

namespace strata::models::tokenizer {
namespace {

using testing::bpe_file;
using testing::byte_level_alphabet;
using testing::Json;
using testing::Strings;
using testing::TestTokenizer;
using testing::vocab_of;

// A byte-level tokenizer whose id of each byte's character is the byte.
Json byte_level_file() {
  Json file = bpe_file(vocab_of(byte_level_alphabet()));
  file["decoder"] = {{"type", "ByteLevel"}};
  return file;
}

std::vector<std::int32_t> byte_ids(std::string_view text) {
  std::vector<std::int32_t> ids;
  for (const char byte : text)
    ids.push_back(static_cast<unsigned char>(byte));
  return ids;
}

Strings steps(const Tokenizer& tokenizer, const std::vector<std::int32_t>& ids,
              bool skip_special_tokens = false) {
  DecodeStream stream(tokenizer, skip_special_tokens);
  Strings texts;
  for (const std::int32_t id : ids)
    texts.push_back(stream.step(id));
  return texts;
}

// A character's bytes show nothing until the last: the text before it ends in U+FFFD.
TEST(DecodeStream, HoldsAMultiByteCharacterUntilItCompletes) {
  const TestTokenizer tokenizer(byte_level_file());
  // a, then é (C3 A9), then € (E2 82 AC), then 😀 (F0 9F 98 80).
  const std::string text = "a\u00E9\u20AC\U0001F600";
  EXPECT_EQ(steps(tokenizer.get(), byte_ids(text)),
            (Strings{"a", "", "\u00E9", "", "", "\u20AC", "", "", "", "\U0001F600"}));
}

TEST(DecodeStream, StepsAddUpToTheWholeDecode) {
  const TestTokenizer tokenizer(byte_level_file());
  const std::string text = "x\u00E9y \u4E16\u754C!\n\U0001F600z";
  const std::vector<std::int32_t> ids = byte_ids(text);
  std::string streamed;
  for (const std::string& step : steps(tokenizer.get(), ids))
    streamed += step;
  EXPECT_EQ(streamed, tokenizer.get().decode(ids));
  EXPECT_EQ(streamed, text);
}

// An invalid byte also decodes to U+FFFD, so it too is held until another id follows it.
TEST(DecodeStream, AnInvalidByteComesOutWithTheNextId) {
  const TestTokenizer tokenizer(byte_level_file());
  EXPECT_EQ(steps(tokenizer.get(), {0xFF, 'a'}), (Strings{"", "\uFFFDa"}));
}

// Decoders that look at the first token (Strip drops its leading space) see the previous
// token again, so the second word keeps the space that decoding it alone would lose.
TEST(DecodeStream, KeepsTheSpaceALlamaDecoderStripsFromTheFirstToken) {
  Json file = bpe_file(vocab_of({"\u2581hello", "\u2581world", "<0xC3>", "<0xA9>"}));
  file["decoder"] = {{"type", "Sequence"},
                     {"decoders",
                      {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                       {{"type", "ByteFallback"}},
                       {{"type", "Fuse"}},
                       {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  const TestTokenizer tokenizer(file);
  EXPECT_EQ(steps(tokenizer.get(), tokenizer.ids_of({"\u2581hello", "\u2581world", "<0xC3>",
                                                     "<0xA9>", "\u2581world"})),
            (Strings{"hello", " world", "", "\u00E9", " world"}));
}

TEST(DecodeStream, SkipsSpecialTokensWhenAsked) {
  Json file = byte_level_file();
  file["added_tokens"].push_back(testing::added_token("<|end|>", 256, true));
  const TestTokenizer tokenizer(file);
  EXPECT_EQ(steps(tokenizer.get(), {'a', 256, 'b'}, true), (Strings{"a", "", "b"}));
  EXPECT_EQ(steps(tokenizer.get(), {'a', 256, 'b'}, false), (Strings{"a", "<|end|>", "b"}));
}

}  // namespace
}  // namespace strata::models::tokenizer

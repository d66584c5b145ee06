#include "models/tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace strata::models::tokenizer {
namespace {

TEST(Utf8, InvalidOffsetNamesTheFirstBadByte) {
  EXPECT_EQ(invalid_utf8_offset("plain ascii"), std::string_view::npos);
  EXPECT_EQ(invalid_utf8_offset("caf\xC3\xA9"), std::string_view::npos);
  EXPECT_EQ(invalid_utf8_offset("ab\xFF"
                                "cd"),
            2u);
  EXPECT_EQ(invalid_utf8_offset("ab\xC3"), 2u);            // truncated
  EXPECT_EQ(invalid_utf8_offset("\xC0\xAF"), 0u);          // overlong
  EXPECT_EQ(invalid_utf8_offset("x\xED\xA0\x80"), 1u);     // a surrogate
  EXPECT_EQ(invalid_utf8_offset("\xF4\x90\x80\x80"), 0u);  // past U+10FFFF
}

TEST(Utf8, LossyReplacesEachMaximalSubpart) {
  // As Rust's from_utf8_lossy: "\xF0\x9F\x98" is one incomplete sequence, one U+FFFD.
  EXPECT_EQ(utf8_lossy("a\xF0\x9F\x98"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(utf8_lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");
}

TEST(Utf8, CompletePrefixHoldsBackAnIncompleteTail) {
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(utf8_complete_prefix("ab\xFF"), 3u);  // invalid bytes are not held
}

}  // namespace
}  // namespace strata::models::tokenizer

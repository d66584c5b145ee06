// The JavaScript text helpers: numbers printed and read as JavaScript does, JSON.stringify's
// quoting, UTF-16 lengths, white space and case.
#include "models/chat/jinja_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace strata::models::chat::jinja {
namespace {

TEST(JinjaText, NumbersPrintAsJavaScript) {
  EXPECT_EQ(js_number(0), "0");
  EXPECT_EQ(js_number(-0.0), "0");
  EXPECT_EQ(js_number(100), "100");
  EXPECT_EQ(js_number(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(js_number(123.456), "123.456");
  EXPECT_EQ(js_number(-1.5), "-1.5");
  EXPECT_EQ(js_number(1e20), "100000000000000000000");
  EXPECT_EQ(js_number(1e21), "1e+21");
  EXPECT_EQ(js_number(1.5e-7), "1.5e-7");
  EXPECT_EQ(js_number(0.000001), "0.000001");
  EXPECT_EQ(js_number(1152921504606846976.0), "1152921504606847000");
  EXPECT_EQ(js_number(5e-324), "5e-324");
  EXPECT_EQ(js_number(std::numeric_limits<double>::max()), "1.7976931348623157e+308");
  EXPECT_EQ(js_number(std::nan("")), "NaN");
  EXPECT_EQ(js_number(-HUGE_VAL), "-Infinity");
}

TEST(JinjaText, StringsReadAsNumbersAsJavaScript) {
  EXPECT_EQ(js_to_number(" 12 "), 12);
  EXPECT_EQ(js_to_number(""), 0);
  EXPECT_EQ(js_to_number("0x1A"), 26);
  EXPECT_EQ(js_to_number("1e3"), 1000);
  EXPECT_EQ(js_to_number(".5"), 0.5);
  EXPECT_EQ(js_to_number("-Infinity"), -HUGE_VAL);
  EXPECT_TRUE(std::isnan(js_to_number("12px")));
  EXPECT_TRUE(std::isnan(js_to_number("inf")));
  EXPECT_EQ(js_parse_int("  -42abc"), -42);
  EXPECT_EQ(js_parse_int("1e3"), 1);
  EXPECT_FALSE(js_parse_int("x1").has_value());
  EXPECT_EQ(js_parse_float(" 2.5e1z"), 25);
  EXPECT_EQ(js_parse_float("-.5"), -0.5);
  EXPECT_FALSE(js_parse_float("e5").has_value());
}

TEST(JinjaText, JsonQuotingAsJsonStringify) {
  EXPECT_EQ(json_quote("a\"b\\c\n\t\x01\x7f é😀", false), "\"a\\\"b\\\\c\\n\\t\\u0001\x7f é😀\"");
  EXPECT_EQ(json_quote("\x7f é😀", true), "\"\\u007f \\u00e9\\ud83d\\ude00\"");
}

TEST(JinjaText, LengthsAndIndicesInUtf16Units) {
  EXPECT_EQ(utf16_length("aé東😀"), 5u);
  EXPECT_EQ(utf16_at("aé😀x", 1), "é");
  EXPECT_EQ(utf16_at("aé😀x", 2), "\xEF\xBF\xBD");  // half of a surrogate pair
  EXPECT_EQ(utf16_at("aé😀x", -1), "x");
  EXPECT_FALSE(utf16_at("ab", 2).has_value());
  EXPECT_EQ(code_points("a😀é").size(), 3u);
  // U+FFFD sorts after the lead surrogate of U+1F600, as JavaScript compares units.
  EXPECT_GT(compare_utf16("\xEF\xBF\xBD", "😀"), 0);
}

TEST(JinjaText, WhiteSpaceAsJavaScriptTrims) {
  EXPECT_EQ(trim("\u3000\u00a0\ufeff x \u2028\n"), "x");
  EXPECT_EQ(trim_start("\t x "), "x ");
  EXPECT_EQ(trim_end("\t x \u200b"), "\t x \u200b");  // U+200B is not white space
}

TEST(JinjaText, CaseAsJavaScript) {
  EXPECT_EQ(js_upper("straße ﬁ é"), "STRASSE FI É");
  EXPECT_EQ(js_lower("ΣΑΣ İ"), "σας i̇");
  EXPECT_EQ(js_title("hello wORLD don't é-x_y"), "Hello WORLD Don'T é-X_y");
  EXPECT_EQ(js_capitalize("éa B"), "Éa B");
  EXPECT_EQ(js_capitalize("😀a"), "😀a");
}

TEST(JinjaText, ReplaceAsReplaceAll) {
  EXPECT_EQ(js_replace("aaa", "a", "b", -1), "bbb");
  EXPECT_EQ(js_replace("aaa", "a", "b", 2), "bba");
  EXPECT_EQ(js_replace("aé", "", "-", -1), "-a-é-");
  EXPECT_EQ(js_replace("ab", "", "-", 1), "-ab");
  EXPECT_EQ(js_replace("ab", "x", "-", 0), "ab");
}

}  // namespace
}  // namespace strata::models::chat::jinja

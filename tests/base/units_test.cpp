#include "base/units.h"

#include <gtest/gtest.h>

namespace strata::base {
namespace {

TEST(ParseCount, AcceptsModelSizeSuffixes) {
  EXPECT_EQ(parse_count("7B"), 7'000'000'000);
  EXPECT_EQ(parse_count("1.3B"), 1'300'000'000);
  EXPECT_EQ(parse_count("350M"), 350'000'000);
  EXPECT_EQ(parse_count("0.5b"), 500'000'000);
  EXPECT_EQ(parse_count("2T"), 2'000'000'000'000);
  EXPECT_EQ(parse_count("12k"), 12'000);
  EXPECT_EQ(parse_count("1000"), 1000);
}

TEST(ParseCount, AcceptsScientificNotation) {
  EXPECT_EQ(parse_count("5e8"), 500'000'000);
  EXPECT_EQ(parse_count("1e9"), 1'000'000'000);
}

TEST(ParseCount, RefusesWhatIsNotACount) {
  EXPECT_FALSE(parse_count(""));
  EXPECT_FALSE(parse_count("seven"));
  EXPECT_FALSE(parse_count("-5"));
  EXPECT_FALSE(parse_count("7X"));
  EXPECT_FALSE(parse_count("7BB"));
  EXPECT_FALSE(parse_count("1.5"));
  EXPECT_FALSE(parse_count("1e30"));
}

TEST(ParseBytes, AcceptsBinarySuffixes) {
  EXPECT_EQ(parse_bytes("4G"), 4LL << 30);
  EXPECT_EQ(parse_bytes("1M"), 1 << 20);
  EXPECT_EQ(parse_bytes("128K"), 128 << 10);
  EXPECT_EQ(parse_bytes("128KiB"), 128 << 10);
  EXPECT_EQ(parse_bytes("1.5GiB"), 3LL << 29);
  EXPECT_EQ(parse_bytes("4096"), 4096);
  EXPECT_EQ(parse_bytes("4096B"), 4096);
}

TEST(ParseBytes, RefusesWhatIsNotASize) {
  EXPECT_FALSE(parse_bytes("4Q"));
  EXPECT_FALSE(parse_bytes("4GX"));
  EXPECT_FALSE(parse_bytes("0.3"));
  EXPECT_FALSE(parse_bytes("abc"));
}

TEST(FormatBytes, PicksTheLargestUnitBelowTheValue) {
  EXPECT_EQ(format_bytes(3), "3 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3.0 * (1LL << 30)), "3.00 GiB");
}

TEST(FormatCount, UsesModelSizeSuffixes) {
  EXPECT_EQ(format_count(1.3e9), "1.30B");
  EXPECT_EQ(format_count(999), "999");
}

}  // namespace
}  // namespace strata::base

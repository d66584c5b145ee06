// When a generation ends, and how much of its text may be shown while it runs.
#include "models/generate/stop_conditions.h"

#include <gtest/gtest.h>

namespace strata::models::generate {
namespace {

TEST(StopConditions, AnEndIdThenAStopStringThenTheBudget) {
  const StopConditions stops({2, 7}, {"\nUser:"}, 5);
  EXPECT_EQ(stops.after(3, "Hello", 1), std::nullopt);
  EXPECT_EQ(stops.after(7, "Hello", 2), StopReason::eos);  // any of the end ids
  EXPECT_EQ(stops.after(2, "Hello\nUser:", 5), StopReason::eos);
  EXPECT_EQ(stops.after(4, "Hello\nUser: hi", 3), StopReason::stop_string);
  EXPECT_EQ(stops.after(4, "Hello there", 5), StopReason::max_new_tokens);
  EXPECT_EQ(to_string(StopReason::stop_string), "stop string");
}

TEST(StopConditions, TextBeforeAStopStringIsShownAndItsPossibleStartHeldBack) {
  const StopConditions stops({}, {"###", "\nUser:"}, 100);
  EXPECT_EQ(stops.shown("Hello", false), 5u);
  EXPECT_EQ(stops.shown("Hello\nUs", false), 5u);  // "\nUs" may become "\nUser:"
  EXPECT_EQ(stops.shown("Hello #", false), 6u);    // "#" may become "###"
  EXPECT_EQ(stops.shown("Hello ##", false), 6u);
  EXPECT_EQ(stops.shown("Hello\nUsa", false), 9u);  // no longer a start
  EXPECT_EQ(stops.shown("Hi ### there ###", false), 3u);
  EXPECT_EQ(stops.shown("Hello\nUs", true), 8u);  // finished: nothing can complete it
  EXPECT_EQ(stops.shown("Hi\nUser: x", true), 2u);
}

TEST(StopConditions, WithoutStopStringsEverythingIsShown) {
  const StopConditions stops({0}, {}, 1);
  EXPECT_EQ(stops.shown("anything #", false), 10u);
  EXPECT_EQ(stops.after(5, "x", 1), StopReason::max_new_tokens);
  EXPECT_TRUE(stops.is_eos(0));
  EXPECT_FALSE(stops.is_eos(5));
}

}  // namespace
}  // namespace strata::models::generate

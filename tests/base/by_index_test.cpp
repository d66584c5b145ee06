#include "base/by_index.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>

namespace strata::base {
namespace {

TEST(ByIndex, IndexesByIntLikeTheVectorItHolds) {
  ByIndex<std::string> names(3, "x");
  names[1] = "middle";
  EXPECT_EQ(names.size(), 3);
  EXPECT_EQ(names[0], "x");
  EXPECT_EQ(names[1], "middle");
  EXPECT_EQ(names.items(), (std::vector<std::string>{"x", "middle", "x"}));
}

TEST(ByIndex, HoldsBoolsAsAVectorOfBoolDoes) {
  ByIndex<bool> flags(4, false);
  flags[2] = true;
  EXPECT_FALSE(flags[1]);
  EXPECT_TRUE(flags[2]);
  flags.assign(2, true);
  EXPECT_EQ(flags.size(), 2);
  EXPECT_TRUE(flags[1]);
}

TEST(ByIndex, GrowsAndIteratesInOrder) {
  ByIndex<int> values;
  EXPECT_TRUE(values.empty());
  for (int i = 0; i < 5; ++i)
    values.push_back(i * i);
  EXPECT_EQ(std::accumulate(values.begin(), values.end(), 0), 30);
  values.resize(2);
  EXPECT_EQ(values.size(), 2);
  EXPECT_EQ(values[1], 1);
  values.clear();
  EXPECT_TRUE(values.empty());
}

}  // namespace
}  // namespace strata::base

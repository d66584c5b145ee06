// The first-failure latch: the first cause wins, later fail() calls are ignored, and check()
// names the first cause with its fix, also when several threads fail it at once.
#include "base/failure_latch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"

namespace strata::base {
namespace {

using ::testing::HasSubstr;

FailureLatch shards_latch() {
  return FailureLatch("the shards are inconsistent since {} failed", "start again");
}

// check()'s UserError, or a failed expectation when it does not throw one.
UserError refusal_of(const FailureLatch& latch) {
  try {
    latch.check();
  } catch (const UserError& error) {
    return error;
  }
  ADD_FAILURE() << "check() did not throw";
  return UserError("", "");
}

TEST(FailureLatch, StartsUnfailedAndCheckPasses) {
  const FailureLatch latch = shards_latch();
  EXPECT_FALSE(latch.failed());
  EXPECT_EQ(latch.cause(), "");
  EXPECT_NO_THROW(latch.check());
}

TEST(FailureLatch, TheFirstCauseWinsAndLaterCallsNameIt) {
  FailureLatch latch = shards_latch();
  EXPECT_TRUE(latch.fail("a read at offset 4096", "check the drive"));
  EXPECT_FALSE(latch.fail("the next step", "something else"));
  EXPECT_FALSE(latch.fail("a third failure"));
  EXPECT_TRUE(latch.failed());
  EXPECT_EQ(latch.cause(), "a read at offset 4096");
  for (int call = 0; call < 2; ++call) {
    const UserError error = refusal_of(latch);
    EXPECT_STREQ(error.what(), "the shards are inconsistent since a read at offset 4096 failed");
    EXPECT_EQ(error.fix(), "check the drive");
  }
}

TEST(FailureLatch, AFailureWithoutAFixCarriesTheLatchsFix) {
  FailureLatch latch = shards_latch();
  latch.fail("a write");
  EXPECT_EQ(refusal_of(latch).fix(), "start again");
}

// Braces in a cause are the cause's text, not a format.
TEST(FailureLatch, ACauseIsNotAFormat) {
  FailureLatch latch("refused: {}", "fix");
  latch.fail("the file {0} at {}");
  EXPECT_STREQ(refusal_of(latch).what(), "refused: the file {0} at {}");
}

// Several threads fail the latch at once: exactly one call wins, and the cause kept is that
// call's, whole.
TEST(FailureLatch, ConcurrentFailuresKeepExactlyOne) {
  constexpr int kThreads = 8;
  for (int round = 0; round < 50; ++round) {
    FailureLatch latch = shards_latch();
    std::vector<int> won(kThreads, 0);
    {
      std::vector<std::jthread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&latch, &won, t] {
          won[static_cast<std::size_t>(t)] = latch.fail(fmt::format("thread {}", t)) ? 1 : 0;
        });
      }
    }
    int winners = 0;
    int winner = -1;
    for (int t = 0; t < kThreads; ++t) {
      if (won[static_cast<std::size_t>(t)] == 0) continue;
      ++winners;
      winner = t;
    }
    ASSERT_EQ(winners, 1) << "round " << round;
    EXPECT_EQ(latch.cause(), fmt::format("thread {}", winner));
    EXPECT_THAT(refusal_of(latch).what(), HasSubstr(fmt::format("since thread {} failed", winner)));
  }
}

}  // namespace
}  // namespace strata::base

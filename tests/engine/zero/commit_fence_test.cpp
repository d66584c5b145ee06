// The expect/commit handshake between the optimizer's thread and the forward's gathers: a reader
// of an expected range goes on only once it is committed, sees what was written before the
// commit, takes each upload once, and fails with the first cause once the ranges are abandoned.
#include "engine/zero/commit_fence.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "gpu/open_device.h"

namespace strata::engine::zero {
namespace {

using ::testing::HasSubstr;

// Range `index` of kRanges consecutive ranges of kRangeSize elements.
constexpr int kRanges = 16;
constexpr std::int64_t kRangeSize = 2048;
Range range_at(int index) {
  return Range{index * kRangeSize, (index + 1) * kRangeSize};
}

// wait_for's callback that records which uploads it was handed.
struct Uploads {
  std::vector<const gpu::Event*> handed;
  std::function<void(const gpu::Event&)> taker() {
    return [this](const gpu::Event& upload) { handed.push_back(&upload); };
  }
};

TEST(CommitFence, NothingExpectedIsNeverWaitedFor) {
  CommitFence fence;
  Uploads uploads;
  EXPECT_FALSE(fence.awaits(range_at(0)));
  EXPECT_FALSE(fence.expects(range_at(0)));
  fence.wait_for(range_at(0), uploads.taker());
  fence.commit(range_at(0), nullptr);  // not expected: nothing to do
  EXPECT_EQ(fence.commit_waits(), 0);
  EXPECT_EQ(fence.upload_waits(), 0);
  EXPECT_TRUE(uploads.handed.empty());
}

// A range is awaited by every span it overlaps, and by no other, until its commit.
TEST(CommitFence, AnExpectedRangeIsAwaitedWhereItOverlapsUntilCommitted) {
  CommitFence fence;
  fence.expect(Range{2048, 6144});
  EXPECT_TRUE(fence.expects(Range{2048, 6144}));
  EXPECT_FALSE(fence.expects(Range{2048, 4096}));
  EXPECT_TRUE(fence.awaits(Range{0, 2049}));
  EXPECT_TRUE(fence.awaits(Range{6143, 9000}));
  EXPECT_FALSE(fence.awaits(Range{0, 2048}));
  EXPECT_FALSE(fence.awaits(Range{6144, 9000}));
  Uploads uploads;
  fence.wait_for(Range{0, 2048}, uploads.taker());  // beside it: no wait
  EXPECT_EQ(fence.commit_waits(), 0);
  fence.commit(Range{2048, 6144}, nullptr);
  EXPECT_FALSE(fence.expects(Range{2048, 6144}));
  EXPECT_FALSE(fence.awaits(Range{3000, 3001}));
  fence.wait_for(Range{3000, 3001}, uploads.taker());
  EXPECT_EQ(fence.commit_waits(), 0);
  EXPECT_TRUE(uploads.handed.empty());
}

// A commit with an upload keeps it for the first reader of the range, which takes it once; a
// reader of another range takes none.
TEST(CommitFence, EachUploadGoesToOneReaderOnce) {
  const std::unique_ptr<gpu::Device> device = gpu::create_host_device({});
  CommitFence fence;
  fence.expect(range_at(0));
  fence.expect(range_at(1));
  const std::shared_ptr<gpu::Event> first = device->create_event();
  const std::shared_ptr<gpu::Event> second = device->create_event();
  fence.commit(range_at(0), first);
  fence.commit(range_at(1), second);
  EXPECT_FALSE(fence.awaits(range_at(0)));
  Uploads uploads;
  fence.wait_for(range_at(1), uploads.taker());
  EXPECT_EQ(uploads.handed, (std::vector<const gpu::Event*>{second.get()}));
  fence.wait_for(range_at(1), uploads.taker());
  fence.wait_for(Range{0, 2 * kRangeSize}, uploads.taker());
  EXPECT_EQ(uploads.handed, (std::vector<const gpu::Event*>{second.get(), first.get()}));
  EXPECT_EQ(fence.upload_waits(), 2);
  EXPECT_EQ(fence.commit_waits(), 0);
}

// Abandoned, the ranges not committed fail their readers with the first cause and its fix; a
// committed one is still read, and a later abandon changes nothing.
TEST(CommitFence, AbandonedRangesFailTheirReadersWithTheFirstCause) {
  CommitFence fence;
  fence.expect(range_at(0));
  fence.expect(range_at(1));
  fence.commit(range_at(0), nullptr);
  fence.abandon("writing the swap file failed", "free space on the disk");
  fence.abandon("a later failure", "another fix");
  Uploads uploads;
  fence.wait_for(range_at(0), uploads.taker());
  for (int call = 0; call < 2; ++call) {
    try {
      fence.wait_for(range_at(1), uploads.taker());
      FAIL() << "the read of an abandoned range returned";
    } catch (const UserError& error) {
      EXPECT_STREQ(error.what(),
                   "the optimizer step that was finishing beside this forward failed: writing "
                   "the swap file failed");
      EXPECT_EQ(error.fix(), "free space on the disk");
    }
  }
  EXPECT_EQ(fence.commit_waits(), 2);
}

TEST(CommitFence, AnAbandonWithoutAFixSaysTrainingCannotContinue) {
  CommitFence fence;
  fence.expect(range_at(0));
  fence.abandon("the step failed", "");
  Uploads uploads;
  try {
    fence.wait_for(range_at(0), uploads.taker());
    FAIL() << "the read of an abandoned range returned";
  } catch (const UserError& error) {
    EXPECT_EQ(error.fix(), "training cannot continue from this state");
  }
}

// The committing thread writes each range's values, then commits it, and after `abandon_at`
// ranges (kRanges: none) abandons the rest; the reader, on this thread, reads the ranges in
// order. Each range it reads holds what was written before its commit (plain memory: only the
// fence orders the two threads), and the first range not committed fails with the cause.
void read_beside_a_committing_thread(int abandon_at, int round) {
  CommitFence fence;
  for (int r = 0; r < kRanges; ++r)
    fence.expect(range_at(r));
  std::vector<int> values(kRanges, 0);
  std::jthread committer([&] {
    for (int r = 0; r < abandon_at; ++r) {
      values[static_cast<std::size_t>(r)] = round * 100 + r + 1;
      fence.commit(range_at(r), nullptr);
    }
    if (abandon_at < kRanges) fence.abandon(fmt::format("range {} failed", abandon_at), "fix");
  });
  Uploads uploads;
  for (int r = 0; r < kRanges; ++r) {
    if (r < abandon_at) {
      fence.wait_for(range_at(r), uploads.taker());
      ASSERT_EQ(values[static_cast<std::size_t>(r)], round * 100 + r + 1) << "range " << r;
      continue;
    }
    try {
      fence.wait_for(range_at(r), uploads.taker());
      FAIL() << "range " << r << " was read although it was never committed";
    } catch (const UserError& error) {
      EXPECT_THAT(error.what(), HasSubstr(fmt::format("range {} failed", abandon_at)));
    }
  }
  committer.join();
  EXPECT_LE(fence.commit_waits(), kRanges);
  EXPECT_TRUE(uploads.handed.empty());
}

TEST(CommitFence, AReaderSeesWhatWasWrittenBeforeEachCommit) {
  for (int round = 0; round < 20; ++round)
    read_beside_a_committing_thread(kRanges, round);
}

TEST(CommitFence, AReaderBesideAnAbandoningThreadReadsTheCommittedAndFailsOnTheRest) {
  for (int round = 0; round < 20; ++round)
    read_beside_a_committing_thread(round % kRanges, round);
}

// Several readers wait for the same range: one commit releases all of them, and its upload goes
// to exactly one.
TEST(CommitFence, OneCommitReleasesEveryReaderAndItsUploadGoesToOne) {
  const std::unique_ptr<gpu::Device> device = gpu::create_host_device({});
  constexpr int kReaders = 4;
  CommitFence fence;
  fence.expect(range_at(0));
  int value = 0;
  std::vector<int> seen(kReaders, 0);
  std::vector<int> taken(kReaders, 0);
  {
    std::vector<std::jthread> readers;
    for (int t = 0; t < kReaders; ++t) {
      readers.emplace_back([&, t] {
        fence.wait_for(range_at(0),
                       [&](const gpu::Event&) { ++taken[static_cast<std::size_t>(t)]; });
        seen[static_cast<std::size_t>(t)] = value;
      });
    }
    value = 7;
    fence.commit(range_at(0), device->create_event());
  }
  EXPECT_EQ(seen, std::vector<int>(kReaders, 7));
  int uploads = 0;
  for (int count : taken)
    uploads += count;
  EXPECT_EQ(uploads, 1);
  EXPECT_EQ(fence.upload_waits(), 1);
}

}  // namespace
}  // namespace strata::engine::zero

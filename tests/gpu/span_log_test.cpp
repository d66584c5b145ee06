// The bookkeeping of a stream's timeline row timed by device events (the CUDA backend's): which
// ops share a span, the bound on the spans held, and which spans a synchronize reads back. The
// CUDA stream records its events as these placements say (tests/gpu/stream_timeline_test.cpp
// runs that on a GPU).
#include "gpu/detail/span_log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata::gpu::detail {
namespace {

using Mark = SpanLog::Mark;

struct Resolved {
  std::int64_t slot;
  std::uint64_t recording;
  std::string label;
  bool operator==(const Resolved&) const = default;
};

std::vector<Resolved> resolve(SpanLog& log, std::int64_t through) {
  std::vector<Resolved> resolved;
  log.resolve(through, [&](const SpanLog::Closed& span) {
    resolved.push_back(Resolved{span.slot, span.recording, std::string(span.label)});
  });
  return resolved;
}

TEST(SpanLog, ConsecutiveOpsOfOneKindAndLabelShareASpan) {
  SpanLog log(8);
  EXPECT_EQ(log.place("kernel", "forward h.0", 1).mark, Mark::open);
  EXPECT_EQ(log.place("kernel", "forward h.0", 1).mark, Mark::extend);
  EXPECT_EQ(log.place("kernel", "forward h.0", 1).slot, 0);
  // Another kind, another label, or another recording opens a span.
  EXPECT_EQ(log.place("wait", "forward h.0", 1).slot, 1);
  EXPECT_EQ(log.place("wait", "forward h.1", 1).slot, 2);
  EXPECT_EQ(log.place("wait", "forward h.1", 2).slot, 3);
  // Back to an earlier kind and label: a new span, since ops in between ran on the stream.
  const SpanLog::Placement again = log.place("kernel", "forward h.0", 2);
  EXPECT_EQ(again.mark, Mark::open);
  EXPECT_EQ(again.slot, 4);
  EXPECT_EQ(log.place("copy h2d", "", 2).slot, 5);
  EXPECT_EQ(log.held(), 6);
  const std::vector<Resolved> expected = {{0, 1, "kernel forward h.0"}, {1, 1, "wait forward h.0"},
                                          {2, 1, "wait forward h.1"},   {3, 2, "wait forward h.1"},
                                          {4, 2, "kernel forward h.0"}, {5, 2, "copy h2d"}};
  EXPECT_EQ(resolve(log, log.close()), expected);
  EXPECT_EQ(log.held(), 0);
}

// A synchronize closes the newest span first: an op enqueued after it (which the synchronize
// does not wait for) starts a span of its own, and only the spans before the mark are read.
TEST(SpanLog, CloseEndsTheNewestSpanAndResolveStopsAtTheMark) {
  SpanLog log(8);
  log.place("kernel", "backward h.3", 1);
  const std::int64_t mark = log.close();
  const SpanLog::Placement after = log.place("kernel", "backward h.3", 1);
  EXPECT_EQ(after.mark, Mark::open);
  EXPECT_EQ(after.slot, 1);
  EXPECT_EQ(resolve(log, mark), (std::vector<Resolved>{{0, 1, "kernel backward h.3"}}));
  EXPECT_EQ(log.held(), 1);
  // A second synchronize with the same (older) mark, from another thread, reads nothing again.
  EXPECT_TRUE(resolve(log, mark).empty());
  // The open span after the mark still takes ops until the next close.
  EXPECT_EQ(log.place("kernel", "backward h.3", 1).mark, Mark::extend);
  EXPECT_EQ(resolve(log, log.close()), (std::vector<Resolved>{{1, 1, "kernel backward h.3"}}));
}

// The events a stream holds are bounded: with every slot held, ops are not drawn (and counted),
// and the newest span does not take ops across the gap; resolved slots are reused in ring order.
TEST(SpanLog, AFullLogDropsOpsAndReusesSlotsOnceResolved) {
  SpanLog log(3);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(log.place("fill", "step " + std::to_string(i), 1).slot, i);
  EXPECT_EQ(log.place("fill", "step 3", 1).mark, Mark::none);
  EXPECT_EQ(log.place("fill", "step 2", 1).mark, Mark::none);  // not joined to span 2: a gap
  EXPECT_EQ(log.take_dropped(), 2);
  EXPECT_EQ(log.take_dropped(), 0);
  EXPECT_EQ(log.held(), 3);
  EXPECT_EQ(resolve(log, log.close()).size(), 3u);
  for (int i = 0; i < 5; ++i) {
    const SpanLog::Placement placed = log.place("copy d2h", "span " + std::to_string(i), 1);
    ASSERT_EQ(placed.mark, i < 3 ? Mark::open : Mark::none) << i;
    if (i < 3) {
      EXPECT_EQ(placed.slot, i);
    }
  }
  const std::vector<Resolved> expected = {
      {0, 1, "copy d2h span 0"}, {1, 1, "copy d2h span 1"}, {2, 1, "copy d2h span 2"}};
  EXPECT_EQ(resolve(log, log.close()), expected);
  EXPECT_EQ(log.take_dropped(), 2);
}

}  // namespace
}  // namespace strata::gpu::detail

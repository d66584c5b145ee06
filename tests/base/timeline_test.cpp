// The process timeline: spans only while recording, scopes nest and give their thread its label,
// and a stream op carries the label of the scope that enqueued it.
#include "base/timeline.h"

#include <gtest/gtest.h>

#include <thread>

namespace strata::base {
namespace {

TEST(Timeline, RecordsOnlyWhileStartedAndScopesNest) {
  Timeline& line = timeline();
  { const Timeline::Scope before("host", "ignored"); }
  line.start();
  {
    const Timeline::Scope outer("host", "forward", "h.0");
    EXPECT_EQ(Timeline::current_label(), "forward h.0");
    {
      const Timeline::Scope inner("optimizer", "sub-group", "3");
      EXPECT_EQ(Timeline::current_label(), "sub-group 3");
    }
    EXPECT_EQ(Timeline::current_label(), "forward h.0");
    // Another thread has its own label.
    std::thread([] { EXPECT_EQ(Timeline::current_label(), ""); }).join();
  }
  EXPECT_EQ(Timeline::current_label(), "");
  line.stop();
  { const Timeline::Scope after("host", "ignored too"); }
  const std::vector<Timeline::Span> spans = line.spans();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].lane, "optimizer");  // the inner scope ends first
  EXPECT_EQ(spans[0].label, "sub-group 3");
  EXPECT_EQ(spans[1].lane, "host");
  EXPECT_EQ(spans[1].label, "forward h.0");
  EXPECT_LE(spans[1].begin_ns, spans[0].begin_ns);
  EXPECT_GE(spans[1].end_ns, spans[0].end_ns);
  line.start();  // forgets the last recording
  line.stop();
  EXPECT_TRUE(line.spans().empty());
}

}  // namespace
}  // namespace strata::base

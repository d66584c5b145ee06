// The process timeline: spans only while recording, scopes nest and give their thread its label,
// and a stream op carries the label of the scope that enqueued it.
#include "base/timeline.h"

#include <gtest/gtest.h>

#include <chrono>
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

// A device's span is placed by the reference event's interval on the host clock: at the interval's
// midpoint plus the device's milliseconds after the reference.
TEST(Timeline, DeviceSpansArePlacedByTheReferenceMidpoint) {
  using std::chrono::microseconds;
  Timeline line;
  line.start();
  const Timeline::Clock::time_point origin = Timeline::Clock::now();
  // The reference event completed somewhere in [origin + 10 ms, origin + 10.2 ms].
  const Timeline::DeviceClockReference reference{origin + microseconds(10'000),
                                                 origin + microseconds(10'200)};
  line.add_device_span(line.recording_number(), "compute", "kernel forward h.0", reference, -4.0,
                       -1.5);
  // An end the device timed before its begin (rounding of two event times) is its begin.
  line.add_device_span(line.recording_number(), "h2d", "copy h2d", reference, -1.0, -1.25);
  line.stop();
  const std::vector<Timeline::Span> spans = line.spans();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].lane, "compute");
  EXPECT_EQ(spans[0].label, "kernel forward h.0");
  // The origin is taken inside start(), before `origin` above: the spans are at least this far in.
  const auto midpoint_ns = [&](std::int64_t offset_us) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(microseconds(10'100 + offset_us))
        .count();
  };
  EXPECT_GE(spans[0].begin_ns, midpoint_ns(-4'000));
  EXPECT_EQ(spans[0].end_ns - spans[0].begin_ns, 2'500'000);
  EXPECT_EQ(spans[1].end_ns, spans[1].begin_ns);
  EXPECT_EQ(spans[0].end_ns - spans[1].begin_ns, -500'000);
}

// Work a device timed is drawn only in the recording it was enqueued in: a stream synchronized
// after the timeline stopped and started again does not carry the last recording's spans over.
TEST(Timeline, DeviceSpansOfAnotherRecordingAreIgnored) {
  Timeline line;
  EXPECT_EQ(line.recording_number(), 0u);
  line.start();
  const std::uint64_t first = line.recording_number();
  EXPECT_EQ(first, 1u);
  line.stop();
  line.start();
  EXPECT_EQ(line.recording_number(), 2u);
  const Timeline::Clock::time_point now = Timeline::Clock::now();
  const Timeline::DeviceClockReference reference{now, now};
  line.add_device_span(first, "compute", "kernel of the first recording", reference, -0.1, 0.0);
  line.add_device_span(line.recording_number(), "compute", "kernel", reference, -0.1, 0.0);
  line.stop();
  line.add_device_span(line.recording_number(), "compute", "after stop", reference, 0.0, 0.1);
  const std::vector<Timeline::Span> spans = line.spans();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].label, "kernel");
}

}  // namespace
}  // namespace strata::base

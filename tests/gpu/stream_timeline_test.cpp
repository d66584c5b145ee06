// The streams' rows of the timeline (`strata train --timeline`) on every backend: each stream
// draws its ops on its own row, labelled by the scope that enqueued them, in stream order and on
// the host's clock. The host backend times ops on its workers; the CUDA backend with events read
// back when the stream synchronizes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "base/timeline.h"
#include "gpu/ops.h"
#include "tests/gpu/device_test_util.h"

namespace strata::gpu {
namespace {

using testing::DeviceTest;
using testing::Gate;
using Span = base::Timeline::Span;

using StreamTimelineTest = DeviceTest;
STRATA_INSTANTIATE_DEVICE_TESTS(StreamTimelineTest);

// How far a device's span may sit before the host instant it cannot precede: on CUDA a span is
// placed by a reference event timed between two readings of the host clock, off by at most half
// that interval (a launch latency, microseconds); the host backend times on the host clock itself.
std::int64_t clock_tolerance_ns(const std::string& backend) {
  return backend == "cuda" ? 1'000'000 : 0;
}

std::vector<Span> on_lane(const std::vector<Span>& spans, std::string_view lane) {
  std::vector<Span> found;
  for (const Span& span : spans)
    if (span.lane == lane) found.push_back(span);
  return found;
}

std::vector<std::string> labels(const std::vector<Span>& spans) {
  std::vector<std::string> found;
  for (const Span& span : spans)
    found.push_back(span.label);
  return found;
}

const Span& host_span(const std::vector<Span>& spans, std::string_view label) {
  for (const Span& span : spans)
    if (span.lane == "host" && span.label == label) return span;
  ADD_FAILURE() << "no host span " << label;
  return spans.front();
}

// Copies on the copy streams, a wait, a fill, a task and a kernel on the compute stream, all
// under one module's scope: every stream's row has them, in stream order, each labelled with its
// kind and the module, and every span ended before the synchronize that read it returned.
TEST_P(StreamTimelineTest, EachStreamDrawsItsOpsOnItsRowWithTheEnqueuingScope) {
  auto device = open();
  std::unique_ptr<Ops> ops = create_ops(*device);
  DeviceBuffer buffer = device->allocate(4096, "timeline");
  PinnedBuffer host = device->allocate_pinned(4096);
  std::unique_ptr<Event> uploaded = device->create_event();
  std::unique_ptr<Event> computed = device->create_event();
  base::timeline().start();
  {
    const base::Timeline::Scope scope("host", "forward", "h.0");
    device->h2d_stream().copy(buffer.data(), host.data(), 4096, CopyKind::host_to_device);
    device->h2d_stream().record(*uploaded);
    Stream& compute = device->compute_stream();
    compute.wait(*uploaded);
    compute.fill_zero(buffer.data(), 4096);
    compute.launch([] {});
    ops->fill(compute, buffer.as<float>(), 1.0f, 1024);
    compute.record(*computed);
    device->d2h_stream().wait(*computed);
    device->d2h_stream().copy(host.data(), buffer.data(), 4096, CopyKind::device_to_host);
  }
  {
    const base::Timeline::Scope scope("host", "synchronize");
    device->synchronize();
  }
  base::timeline().stop();

  const std::vector<Span> spans = base::timeline().spans();
  // The host backend runs its kernels as tasks; CUDA draws them as kernels.
  const std::string kernel = GetParam() == "cuda" ? "kernel forward h.0" : "task forward h.0";
  EXPECT_THAT(labels(on_lane(spans, "h2d")), ::testing::ElementsAre("copy h2d forward h.0"));
  EXPECT_THAT(
      labels(on_lane(spans, "compute")),
      ::testing::ElementsAre("wait forward h.0", "fill forward h.0", "task forward h.0", kernel));
  EXPECT_THAT(labels(on_lane(spans, "d2h")),
              ::testing::ElementsAre("wait forward h.0", "copy d2h forward h.0"));
  const Span& synchronized = host_span(spans, "synchronize");
  for (std::string_view lane : {"h2d", "compute", "d2h"}) {
    const std::vector<Span> row = on_lane(spans, lane);
    for (std::size_t i = 0; i < row.size(); ++i) {
      EXPECT_GE(row[i].begin_ns, 0) << lane << " " << row[i].label;
      EXPECT_LE(row[i].begin_ns, row[i].end_ns) << lane << " " << row[i].label;
      EXPECT_LE(row[i].end_ns, synchronized.end_ns) << lane << " " << row[i].label;
      if (i > 0) {
        EXPECT_GE(row[i].begin_ns, row[i - 1].end_ns) << lane << " " << row[i].label;
      }
    }
  }
}

// A task held at a gate ends after the host opened it, and the stream's next op begins after the
// task ended: a device's spans are on the host's clock and in stream order.
TEST_P(StreamTimelineTest, SpansAreInStreamOrderOnTheHostClock) {
  auto device = open();
  DeviceBuffer buffer = device->allocate(4096, "timeline");
  Stream& compute = device->compute_stream();
  Gate gate;
  base::timeline().start();
  {
    const base::Timeline::Scope scope("host", "backward", "h.1");
    compute.launch(gate.waiter());
  }
  {
    const base::Timeline::Scope scope("host", "backward", "h.2");
    compute.fill_zero(buffer.data(), 4096);
  }
  {
    const base::Timeline::Scope scope("host", "open the gate");
    gate.open();
  }
  compute.synchronize();
  base::timeline().stop();

  const std::vector<Span> spans = base::timeline().spans();
  const std::vector<Span> row = on_lane(spans, "compute");
  ASSERT_THAT(labels(row), ::testing::ElementsAre("task backward h.1", "fill backward h.2"));
  const Span& opened = host_span(spans, "open the gate");
  EXPECT_GE(row[0].end_ns, opened.begin_ns - clock_tolerance_ns(GetParam()));
  EXPECT_GE(row[1].begin_ns, row[0].end_ns);
}

// Work enqueued while the timeline is off is never drawn, not even by a synchronize that reads
// the stream while a later recording runs.
TEST_P(StreamTimelineTest, NothingEnqueuedWhileTheTimelineIsOffIsDrawn) {
  auto device = open();
  DeviceBuffer buffer = device->allocate(4096, "timeline");
  Stream& compute = device->compute_stream();
  {
    const base::Timeline::Scope scope("host", "forward", "h.3");
    compute.fill_zero(buffer.data(), 4096);
    compute.launch([] {});
  }
  compute.synchronize();
  base::timeline().start();
  compute.synchronize();
  base::timeline().stop();
  EXPECT_TRUE(on_lane(base::timeline().spans(), "compute").empty());
}

}  // namespace
}  // namespace strata::gpu

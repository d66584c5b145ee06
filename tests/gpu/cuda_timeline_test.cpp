// What only the CUDA backend's timeline rows do (tests/gpu/stream_timeline_test.cpp has what
// every backend does): a module's ops of one kind share one span, a stream holds a bounded number
// of spans between two synchronizes, and work enqueued during one recording is never drawn in
// the next. Skips without a usable GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "base/timeline.h"
#include "gpu/detail/span_log.h"
#include "gpu/ops.h"
#include "tests/gpu/device_test_util.h"

namespace strata::gpu {
namespace {

using Span = base::Timeline::Span;

class CudaTimelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::cuda_unavailable_reason().empty()) {
      GTEST_SKIP() << testing::cuda_unavailable_reason();
    }
    device_ = open_device({});
    ASSERT_EQ(device_->kind(), DeviceKind::cuda);
    buffer_ = device_->allocate(4096, "timeline");
  }
  void TearDown() override { base::timeline().stop(); }

  std::vector<Span> compute_spans() const {
    std::vector<Span> found;
    for (const Span& span : base::timeline().spans())
      if (span.lane == "compute") found.push_back(span);
    return found;
  }

  std::unique_ptr<Device> device_;
  DeviceBuffer buffer_;
};

// A module's thousand kernels and fills are two spans (one per kind), not two thousand: the
// events a step needs grow with its modules, not its ops.
TEST_F(CudaTimelineTest, AModulesOpsOfOneKindShareOneSpan) {
  std::unique_ptr<Ops> ops = create_ops(*device_);
  Stream& compute = device_->compute_stream();
  base::timeline().start();
  {
    const base::Timeline::Scope scope("host", "forward", "h.0");
    for (int i = 0; i < 1000; ++i)
      ops->fill(compute, buffer_.as<float>(), static_cast<float>(i), 1024);
    for (int i = 0; i < 1000; ++i)
      compute.fill_zero(buffer_.data(), 4096);
  }
  compute.synchronize();
  base::timeline().stop();
  const std::vector<Span> spans = compute_spans();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].label, "kernel forward h.0");
  EXPECT_EQ(spans[1].label, "fill forward h.0");
  EXPECT_LE(spans[0].end_ns, spans[1].begin_ns);
}

// Between two synchronizes a stream holds at most detail::stream_spans_held_max spans; the ops
// past them are not drawn (one warning says how many), and a synchronize frees the slots.
TEST_F(CudaTimelineTest, AStreamHoldsABoundedNumberOfSpansBetweenSynchronizes) {
  Stream& compute = device_->compute_stream();
  const std::int64_t held_max = detail::stream_spans_held_max;
  base::timeline().start();
  const auto enqueue = [&](std::int64_t count) {
    for (std::int64_t i = 0; i < count; ++i) {
      const base::Timeline::Scope scope("host", "backward", i % 2 == 0 ? "h.0" : "h.1");
      compute.fill_zero(buffer_.data(), 4096);
    }
  };
  enqueue(held_max + 100);
  compute.synchronize();
  EXPECT_EQ(static_cast<std::int64_t>(compute_spans().size()), held_max);
  enqueue(10);
  compute.synchronize();
  base::timeline().stop();
  EXPECT_EQ(static_cast<std::int64_t>(compute_spans().size()), held_max + 10);
}

// A stream read by a synchronize after its recording stopped and another started does not draw
// the first recording's work in the second.
TEST_F(CudaTimelineTest, WorkOfAnEarlierRecordingIsNotDrawnInALaterOne) {
  Stream& compute = device_->compute_stream();
  testing::Gate gate;
  base::timeline().start();
  {
    const base::Timeline::Scope scope("host", "forward", "h.0");
    compute.launch(gate.waiter());
    compute.fill_zero(buffer_.data(), 4096);
  }
  base::timeline().stop();
  base::timeline().start();
  gate.open();
  compute.synchronize();
  base::timeline().stop();
  EXPECT_TRUE(compute_spans().empty());
}

}  // namespace
}  // namespace strata::gpu

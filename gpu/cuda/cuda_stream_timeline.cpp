#include "gpu/cuda/cuda_stream_timeline.h"

#include <utility>

#include "base/assert.h"
#include "base/log.h"
#include "base/timeline.h"
#include "gpu/cuda/cuda_check.h"

namespace strata::gpu::cuda {
namespace {

// Times a reference event against the host clock: recorded on the calling thread's own stream
// (idle: the backend enqueues nothing there outside gpu::plain_copy, which waits for its copy),
// so that it completes at once and the interval between the two readings is the launch latency,
// a few microseconds.
bool time_reference(cudaEvent_t reference, base::Timeline::DeviceClockReference& clock) {
  clock.before = base::Timeline::Clock::now();
  cudaError_t status = cudaEventRecord(reference, cudaStreamPerThread);
  if (status == cudaSuccess) status = cudaEventSynchronize(reference);
  clock.after = base::Timeline::Clock::now();
  if (status == cudaSuccess) return true;
  (void)cudaGetLastError();
  return false;
}

}  // namespace

CudaStreamTimeline::CudaStreamTimeline(std::string lane, int device_index)
    : lane_(std::move(lane)), device_index_(device_index) {}

CudaStreamTimeline::~CudaStreamTimeline() {
  if (events_.empty() && reference_ == nullptr) return;
  (void)cudaSetDevice(device_index_);
  for (const auto& pair : events_) {
    (void)cudaEventDestroy(pair[0]);
    (void)cudaEventDestroy(pair[1]);
  }
  if (reference_ != nullptr) (void)cudaEventDestroy(reference_);
  (void)cudaGetLastError();
}

const std::array<cudaEvent_t, 2>& CudaStreamTimeline::events(std::int64_t slot) {
  // Slots are first used in ring order, so the pool grows a pair at a time up to its bound (more
  // than one only after a failed creation); the vector is reserved at once, so growing never
  // moves the pairs.
  STRATA_ASSERT(slot < detail::stream_spans_held_max);
  if (events_.empty()) {
    use_device(device_index_);
    events_.reserve(static_cast<std::size_t>(detail::stream_spans_held_max));
    if (reference_ == nullptr) {
      check(cudaEventCreateWithFlags(&reference_, cudaEventDefault), "cudaEventCreateWithFlags");
    }
  }
  while (static_cast<std::int64_t>(events_.size()) <= slot) {
    use_device(device_index_);
    std::array<cudaEvent_t, 2> pair{};
    check(cudaEventCreateWithFlags(&pair[0], cudaEventDefault), "cudaEventCreateWithFlags");
    const cudaError_t status = cudaEventCreateWithFlags(&pair[1], cudaEventDefault);
    if (status != cudaSuccess) (void)cudaEventDestroy(pair[0]);
    check(status, "cudaEventCreateWithFlags");
    events_.push_back(pair);
  }
  return events_[static_cast<std::size_t>(slot)];
}

CudaStreamTimeline::Op::Op(CudaStreamTimeline& row, cudaStream_t stream, const char* kind) {
  const base::Timeline& line = base::timeline();
  if (!line.recording()) return;
  std::unique_lock lock(row.mutex_);
  const detail::SpanLog::Placement placed =
      row.log_.place(kind, base::Timeline::current_label(), line.recording_number());
  if (placed.mark == detail::SpanLog::Mark::none) return;
  const std::array<cudaEvent_t, 2>& pair = row.events(placed.slot);
  if (placed.mark == detail::SpanLog::Mark::open) {
    check(cudaEventRecord(pair[0], stream), "cudaEventRecord");
  }
  row_ = &row;
  lock_ = std::move(lock);
  stream_ = stream;
  slot_ = placed.slot;
}

CudaStreamTimeline::Op::~Op() {
  if (row_ == nullptr) return;
  // After the op, also when its call threw: the span then ends where the stream stopped taking
  // work. A failure here leaves the span's end where it was, which flush() reads as no length.
  const cudaEvent_t end = row_->events_[static_cast<std::size_t>(slot_)][1];
  if (cudaEventRecord(end, stream_) != cudaSuccess) (void)cudaGetLastError();
}

std::int64_t CudaStreamTimeline::close() {
  std::lock_guard lock(mutex_);
  return log_.close();
}

void CudaStreamTimeline::flush(std::int64_t mark) noexcept {
  std::lock_guard lock(mutex_);
  if (log_.held() == 0) return;
  const base::Timeline& line = base::timeline();
  base::Timeline::DeviceClockReference clock;
  const bool drawn = line.recording() && reference_ != nullptr &&
                     cudaSetDevice(device_index_) == cudaSuccess &&
                     time_reference(reference_, clock);
  log_.resolve(mark, [&](const detail::SpanLog::Closed& span) {
    if (!drawn || span.recording != line.recording_number()) return;
    // A slot whose events could not be made (its op threw) has none; one made for a later slot
    // after such a failure was never recorded for this span, and cudaEventElapsedTime refuses it.
    if (span.slot >= static_cast<std::int64_t>(events_.size())) return;
    const std::array<cudaEvent_t, 2>& pair = events_[static_cast<std::size_t>(span.slot)];
    float begin_ms = 0;
    float end_ms = 0;
    if (cudaEventElapsedTime(&begin_ms, reference_, pair[0]) != cudaSuccess ||
        cudaEventElapsedTime(&end_ms, reference_, pair[1]) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    base::timeline().add_device_span(span.recording, lane_, span.label, clock, begin_ms, end_ms);
  });
  if (const std::int64_t dropped = log_.take_dropped(); dropped > 0) {
    base::logger("gpu").warn(
        "timeline: stream {} held {} spans since it last synchronized; {} more ops are not drawn",
        lane_, detail::stream_spans_held_max, dropped);
  }
}

}  // namespace strata::gpu::cuda

#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>

#include "gpu/event.h"

namespace strata::gpu::cuda {

// The failures of one stream's host tasks (Stream::launch), shared by the stream, its queued
// tasks and the events recorded on it. Host tasks are numbered in enqueue order; a failure is
// kept with its task's number, so that an event can tell which failures happened before its
// point, and a stream synchronize can report (and clear) the ones enqueued before it was called.
class StreamFailures {
 public:
  // The number of a task being enqueued now (1, 2, ...).
  std::int64_t next_task();
  // The number of the newest task enqueued so far (0: none).
  std::int64_t last_task() const;
  // The newest task number already reported by a synchronize: failures at or before it are old.
  std::int64_t reported_through() const;
  // Callback side: task `task` threw `error`.
  void fail(std::int64_t task, std::exception_ptr error) noexcept;
  // True when a failure not yet reported exists: later tasks of the stream are skipped, as the
  // host backend skips them.
  bool failing() const;
  // For Stream::synchronize once the stream has drained up to task `through`: the first failure
  // in (reported_through(), through], or null; then marks everything up to `through` reported.
  std::exception_ptr take_through(std::int64_t through);
  // For Event::synchronize: the first failure in (after, through], or null. Reported or not.
  std::exception_ptr find(std::int64_t after, std::int64_t through) const;

 private:
  // Failures are rare (a task threw); the newest few are kept for events still to be waited on.
  static constexpr std::size_t kept_failures = 64;

  mutable std::mutex mutex_;
  std::int64_t enqueued_ = 0;
  std::int64_t reported_through_ = 0;
  std::deque<std::pair<std::int64_t, std::exception_ptr>> failures_;
};

// gpu::Event on a cudaEvent_t (timing enabled, blocking sync so that a waiting host thread sleeps
// instead of spinning a core the CPU optimizer could use). A record also remembers which host
// tasks of its stream came before it, so that Event::synchronize rethrows their failures.
class CudaEvent final : public Event {
 public:
  explicit CudaEvent(int device_index);
  ~CudaEvent() override;

  void synchronize() const override;
  bool query() const override;
  double elapsed_ms(const Event& since) const override;

  cudaEvent_t handle() const noexcept { return event_; }
  // Called by CudaStream::record after cudaEventRecord: the point now follows the stream's host
  // tasks up to `through`, and failures after `after` (not reported when recorded) count.
  void on_record(std::shared_ptr<StreamFailures> failures, std::int64_t after,
                 std::int64_t through);

 private:
  int device_index_;
  cudaEvent_t event_ = nullptr;
  mutable std::mutex mutex_;
  bool recorded_ = false;
  std::shared_ptr<StreamFailures> failures_;
  std::int64_t after_ = 0;
  std::int64_t through_ = 0;
};

// `event` as a CudaEvent; aborts when it comes from another backend.
CudaEvent& as_cuda_event(Event& event);
const CudaEvent& as_cuda_event(const Event& event);

}  // namespace strata::gpu::cuda

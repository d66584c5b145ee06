#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/detail/span_log.h"

namespace strata::gpu::cuda {

// One CUDA stream's row on the process's timeline (`strata train --timeline`, base/timeline.h):
// the host backend times each op on its worker thread; a CUDA stream's ops run on the GPU, so
// they are timed by events recorded around them, and read back when the stream synchronizes.
//
// While the timeline records, each op the stream enqueues (an Op around the call) is placed in a
// detail::SpanLog: consecutive ops of one kind and label share a span, whose begin event is
// recorded before its first op and whose end event after each op. The events come from a pool of
// SpanLog-capacity pairs per stream, made when a slot is first used and kept for the stream's
// life. When the stream synchronizes, close() marks the spans the synchronize waits for; flush()
// then times them against a reference event recorded on the calling thread's stream and seen
// complete between two readings of the host clock, and adds them to the timeline
// (Timeline::add_device_span). While the timeline is off an Op costs one relaxed atomic load.
class CudaStreamTimeline {
 public:
  CudaStreamTimeline(std::string lane, int device_index);
  // The stream has been synchronized and destroyed: the events are idle.
  ~CudaStreamTimeline();
  CudaStreamTimeline(const CudaStreamTimeline&) = delete;
  CudaStreamTimeline& operator=(const CudaStreamTimeline&) = delete;

  // One op on `stream`, of `kind` (a string literal: "kernel", "copy h2d", "wait", ...), enqueued
  // by the calling thread while the Op lives. Made before the call that enqueues, destroyed after
  // it. While recording it holds the row's lock, so that another thread's op on the same stream
  // does not land inside the span; the calling thread's device must be current.
  class Op {
   public:
    Op(CudaStreamTimeline& row, cudaStream_t stream, const char* kind);
    ~Op();
    Op(const Op&) = delete;
    Op& operator=(const Op&) = delete;

   private:
    CudaStreamTimeline* row_ = nullptr;  // null: nothing to record
    std::unique_lock<std::mutex> lock_;
    cudaStream_t stream_ = nullptr;
    std::int64_t slot_ = -1;
  };

  // Before the stream synchronizes: ends the newest span and returns the mark for flush().
  std::int64_t close();
  // After the synchronize returned: adds the spans before `mark` to the timeline (when its
  // recording still runs) and frees their events. Never throws: a span whose events cannot be
  // read is left out.
  void flush(std::int64_t mark) noexcept;

 private:
  // The begin and end events of `slot`, made on its first use.
  const std::array<cudaEvent_t, 2>& events(std::int64_t slot);

  std::string lane_;
  int device_index_;
  std::mutex mutex_;
  detail::SpanLog log_{detail::stream_spans_held_max};
  std::vector<std::array<cudaEvent_t, 2>> events_;  // per slot; slots are first used in order
  cudaEvent_t reference_ = nullptr;                 // made with the first slot's events
};

}  // namespace strata::gpu::cuda

#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string_view>

#include "gpu/event.h"

namespace strata::gpu::host {

// What an event is, shared by the Event object and the record and wait ops queued on streams
// (which keep it alive after the Event is destroyed, as CUDA allows).
//
// Records are numbered: `recorded_` counts the records enqueued, `completed_` is the number of
// the newest record that has run. Because a pending record lives on one stream at a time (asserted)
// and a stream runs in order, records complete in number order, so "record g has run" is
// `completed_ >= g`.
class EventState {
 public:
  using Clock = std::chrono::steady_clock;

  // Host side of Stream::record: numbers a new record made on `stream` (named `stream_name`) and
  // returns its number. Aborts when the previous record is still pending on another stream.
  std::int64_t begin_record(const void* stream, std::string_view stream_name);

  // Worker side: record `generation` has run, after work that failed with `error` (or null).
  void complete(std::int64_t generation, std::exception_ptr error);

  // The newest record's number, 0 when never recorded: what a wait issued now waits for.
  std::int64_t recorded() const;

  // Blocks until record `generation` has run; returns the error it carries (or null).
  std::exception_ptr wait_for(std::int64_t generation) const;

  // True when every record has run.
  bool is_complete() const;

  // When the newest record ran; asserts that it was recorded and has run.
  Clock::time_point completed_at() const;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable completed_changed_;
  std::int64_t recorded_ = 0;
  std::int64_t completed_ = 0;
  const void* pending_stream_ = nullptr;
  std::string_view pending_stream_name_;
  std::exception_ptr error_;
  Clock::time_point completed_at_{};
};

// gpu::Event on the host backend.
class HostEvent final : public Event {
 public:
  HostEvent() : state_(std::make_shared<EventState>()) {}

  void synchronize() const override;
  bool query() const override;
  double elapsed_ms(const Event& since) const override;

  // For the streams' record and wait ops.
  const std::shared_ptr<EventState>& state() const noexcept { return state_; }

 private:
  std::shared_ptr<EventState> state_;
};

// `event` as a HostEvent; aborts when it comes from another backend.
const HostEvent& as_host_event(const Event& event);

}  // namespace strata::gpu::host

#include "gpu/host/host_event.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "base/assert.h"
#include "gpu/host_task.h"

namespace strata::gpu::host {

std::int64_t EventState::begin_record(const void* stream, std::string_view stream_name) {
  std::lock_guard lock(mutex_);
  bool pending = completed_ < recorded_;
  if (pending && pending_stream_ != stream) {
    // Two pending records on two streams could complete out of order, and a wait for the older
    // one would be released by the newer one: CUDA allows it, strata's engine never needs it.
    std::fprintf(stderr,
                 "strata: an event is recorded on stream '%.*s' while its previous record on "
                 "stream '%.*s' has not run yet: use a second event\n",
                 static_cast<int>(stream_name.size()), stream_name.data(),
                 static_cast<int>(pending_stream_name_.size()), pending_stream_name_.data());
    std::fflush(stderr);
    std::abort();
  }
  pending_stream_ = stream;
  pending_stream_name_ = stream_name;
  recorded_ += 1;
  return recorded_;
}

void EventState::complete(std::int64_t generation, std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    STRATA_ASSERT(generation <= recorded_);
    if (generation > completed_) {
      completed_ = generation;
      error_ = std::move(error);
      completed_at_ = Clock::now();
    }
  }
  completed_changed_.notify_all();
}

std::int64_t EventState::recorded() const {
  std::lock_guard lock(mutex_);
  return recorded_;
}

std::exception_ptr EventState::wait_for(std::int64_t generation) const {
  std::unique_lock lock(mutex_);
  STRATA_ASSERT(generation <= recorded_);
  completed_changed_.wait(lock, [&] { return completed_ >= generation; });
  return error_;
}

bool EventState::is_complete() const {
  std::lock_guard lock(mutex_);
  return completed_ >= recorded_;
}

EventState::Clock::time_point EventState::completed_at() const {
  std::lock_guard lock(mutex_);
  STRATA_ASSERT(recorded_ > 0);
  STRATA_ASSERT(completed_ >= recorded_);
  return completed_at_;
}

void HostEvent::synchronize() const {
  STRATA_ASSERT(!running_host_task());
  std::exception_ptr error = state_->wait_for(state_->recorded());
  if (error) std::rethrow_exception(error);
}

bool HostEvent::query() const {
  return state_->is_complete();
}

double HostEvent::elapsed_ms(const Event& since) const {
  auto start = as_host_event(since).state()->completed_at();
  auto end = state_->completed_at();
  return std::chrono::duration<double, std::milli>(end - start).count();
}

const HostEvent& as_host_event(const Event& event) {
  const auto* host_event = dynamic_cast<const HostEvent*>(&event);
  STRATA_ASSERT(host_event != nullptr);
  return *host_event;
}

}  // namespace strata::gpu::host

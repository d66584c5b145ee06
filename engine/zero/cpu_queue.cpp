#include "engine/zero/cpu_queue.h"

#include <pthread.h>

#include <utility>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"

namespace strata::engine::zero {

CpuQueue::CpuQueue(std::string name, std::int64_t capacity)
    : name_(std::move(name)), ring_(static_cast<std::size_t>(capacity)) {
  STRATA_ASSERT(capacity > 0);
  thread_ = std::jthread([this](const std::stop_token& stop) { run(stop); });
}

CpuQueue::~CpuQueue() {
  thread_.request_stop();
  thread_.join();
  if (failure_) {
    base::logger("engine").debug("{}: a failed job nobody drained: {}", name_,
                                 strata::describe(failure_));
  }
}

CpuQueue::Ticket CpuQueue::submit(gpu::HostTask job) {
  STRATA_ASSERT(static_cast<bool>(job));
  const auto capacity = static_cast<Ticket>(ring_.size());
  Ticket ticket = 0;
  {
    std::unique_lock lock(mutex_);
    ran_.wait(lock, [&] { return submitted_ - completed_ < capacity; });
    ticket = ++submitted_;
    ring_[static_cast<std::size_t>((ticket - 1) % capacity)] = std::move(job);
  }
  queued_changed_.notify_one();
  return ticket;
}

void CpuQueue::wait(Ticket ticket) {
  std::unique_lock lock(mutex_);
  STRATA_ASSERT(ticket <= submitted_);
  ran_.wait(lock, [&] { return completed_ >= ticket; });
  if (failure_ && failed_at_ <= ticket) std::rethrow_exception(failure_);
  if (drained_failure_ && drained_from_ <= ticket && ticket <= drained_to_)
    std::rethrow_exception(drained_failure_);
}

void CpuQueue::drain() {
  std::unique_lock lock(mutex_);
  ran_.wait(lock, [&] { return completed_ >= submitted_; });
  if (!failure_) return;
  drained_failure_ = std::exchange(failure_, nullptr);
  drained_from_ = std::exchange(failed_at_, 0);
  drained_to_ = submitted_;
  std::rethrow_exception(drained_failure_);
}

CpuQueue::Ticket CpuQueue::last() const {
  const std::lock_guard lock(mutex_);
  return submitted_;
}

void CpuQueue::run(const std::stop_token& stop) {
  const std::string thread_name = ("strata-" + name_).substr(0, 15);  // Linux keeps 15
  pthread_setname_np(pthread_self(), thread_name.c_str());
  const auto capacity = static_cast<Ticket>(ring_.size());
  std::unique_lock lock(mutex_);
  while (true) {
    // False only when a stop was requested and nothing is queued: the queue is drained.
    if (!queued_changed_.wait(lock, stop, [&] { return submitted_ > completed_; })) return;
    const Ticket ticket = completed_ + 1;
    gpu::HostTask job = std::move(ring_[static_cast<std::size_t>((ticket - 1) % capacity)]);
    const bool skip = failure_ != nullptr;
    lock.unlock();
    std::exception_ptr failure;
    if (!skip) {
      try {
        job();
      } catch (...) {
        failure = std::current_exception();
      }
    }
    job.reset();  // its captures are destroyed outside the lock

    lock.lock();
    if (failure && !failure_) {
      failure_ = std::move(failure);
      failed_at_ = ticket;
    }
    completed_ = ticket;
    ran_.notify_all();
  }
}

}  // namespace strata::engine::zero

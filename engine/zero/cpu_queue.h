#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpu/host_task.h"

namespace strata::engine::zero {

// A FIFO of CPU jobs run in order by one thread of its own: the CPU's counterpart of a stream, for
// the work a step does on the host beside the device (adding reduced gradients into the
// partition, scanning them, swapping them to NVMe). Work the CPU does inside a stream, as a host
// function, holds every later op of that stream until it has run; a job here holds nothing but
// the jobs behind it. A job waits for the device by synchronizing an event it was given (it is not
// a host function, so it may).
//
// Jobs are gpu::HostTask (stored inline, in a ring sized at construction: submitting allocates
// nothing). A job that throws is a failure: the jobs after it are skipped until drain() reports
// it, as a stream skips its work after an error. Submitting, waiting and draining are for one
// thread at a time, except wait(), which any thread may call.
class CpuQueue {
 public:
  // 1 for the first job submitted, then 2, 3, ...; 0 names no job (waiting for it returns at once).
  using Ticket = std::int64_t;

  // `name` names the thread; `capacity`: the most jobs queued at once (a full queue blocks
  // submit() until one has run).
  CpuQueue(std::string name, std::int64_t capacity);
  // Runs what is queued, then joins the thread; a failure nobody drained is logged.
  ~CpuQueue();
  CpuQueue(const CpuQueue&) = delete;
  CpuQueue& operator=(const CpuQueue&) = delete;

  Ticket submit(gpu::HostTask job);
  // Blocks until job `ticket` has run (and so every job before it). Rethrows the failure when it
  // happened at or before `ticket` (that job did not run, or ran only in part), before drain()
  // or after it: a wait for a job of the last failure's run throws every time, as a wait on a
  // stream's event after an error does.
  void wait(Ticket ticket);
  // Blocks until every job submitted has run, then rethrows and clears the failure, if any: the
  // jobs submitted after that run again.
  void drain();
  // The last job submitted (0 when none).
  Ticket last() const;

 private:
  void run(const std::stop_token& stop);

  std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable_any queued_changed_;  // stop-aware: the thread also wakes on request_stop
  std::condition_variable ran_;
  std::vector<gpu::HostTask> ring_;
  Ticket submitted_ = 0;
  Ticket completed_ = 0;
  std::exception_ptr failure_;  // not drained yet
  Ticket failed_at_ = 0;
  // The last failure drained, and the jobs it failed or skipped: [drained_from_, drained_to_].
  std::exception_ptr drained_failure_;
  Ticket drained_from_ = 0;
  Ticket drained_to_ = -1;
  // Last member: started after everything above exists, stopped and joined first.
  std::jthread thread_;
};

}  // namespace strata::engine::zero

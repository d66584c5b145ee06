#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "gpu/device.h"
#include "gpu/host/host_event.h"
#include "gpu/host/host_memory.h"
#include "gpu/stream.h"
#include "gpu/transfer_counters.h"

namespace strata::gpu::host {

// gpu::Stream on the host backend: a bounded ring of ops, sized at construction, run in order by
// one worker thread that the stream owns. The destructor lets the worker run everything queued,
// then joins it.
class HostStream final : public Stream {
 public:
  // `memory` checks device pointers; `counters` counts copied bytes; both outlive the stream.
  HostStream(std::string name, const HostMemory& memory, SharedTransferCounters& counters,
             std::int64_t queue_depth);
  // Runs all queued work, joins the worker; an error nobody synchronized is logged, not thrown.
  ~HostStream() override;

  std::string_view name() const override { return name_; }
  void copy(void* target, const void* source, std::int64_t bytes, CopyKind kind) override;
  void fill_zero(void* target, std::int64_t bytes) override;
  void launch(HostTask task) override;
  std::int64_t host_functions() const override { return host_functions_.load(); }
  void record(Event& event) override;
  void wait(const Event& event) override;

  // Waits until all work enqueued before the call has run, then takes the captured error (or
  // null) without throwing: Device::synchronize drains every stream before it throws.
  std::exception_ptr drain() override;

 private:
  struct CopyOp {
    void* target;
    const void* source;
    std::int64_t bytes;
    CopyKind kind;
  };
  struct FillOp {
    void* target;
    std::int64_t bytes;
  };
  struct LaunchOp {
    HostTask task;
  };
  struct RecordOp {
    std::shared_ptr<EventState> event;
    std::int64_t generation;
  };
  struct WaitOp {
    std::shared_ptr<EventState> event;
    std::int64_t generation;
  };
  using Op = std::variant<std::monostate, CopyOp, FillOp, LaunchOp, RecordOp, WaitOp>;
  // An op and, while the timeline records, what its enqueuing thread was doing.
  struct Slot {
    Op op;
    std::string label;
  };

  void enqueue(Op op);
  void run(std::stop_token stop);
  // Runs one op; `upstream` is the stream's error when the op was taken (ops other than records
  // and waits are skipped then). Returns the op's own failure, or null.
  std::exception_ptr execute(Op& op, const std::exception_ptr& upstream);
  // Runs execute(), recording its span on the timeline (lane: this stream's name).
  std::exception_ptr execute_recorded(Slot& slot, const std::exception_ptr& upstream);
  void check_copy(const void* target, const void* source, std::int64_t bytes,
                  CopyKind kind) const noexcept;

  std::string name_;
  const HostMemory& memory_;
  SharedTransferCounters& counters_;              // counted once a copy has run
  std::atomic<std::int64_t> host_functions_ = 0;  // launches that are not HostTask::kernel

  std::mutex mutex_;
  std::condition_variable_any work_queued_;  // stop-aware: the worker also wakes on request_stop
  std::condition_variable space_freed_;
  std::condition_variable work_done_;
  std::vector<Slot> slots_;  // the ring; its size is the queue bound
  std::int64_t head_ = 0;
  std::int64_t queued_ = 0;
  std::int64_t enqueued_total_ = 0;
  std::int64_t completed_total_ = 0;
  std::exception_ptr error_;

  // Last member: started after everything above exists, stopped and joined first.
  std::jthread worker_;
};

}  // namespace strata::gpu::host

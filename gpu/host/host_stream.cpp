#include "gpu/host/host_stream.h"

#include <pthread.h>

#include <cstring>
#include <utility>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timeline.h"

namespace strata::gpu::host {
namespace {

// Linux thread names hold 15 characters; "strata-" leaves 8 for the stream's name.
void name_this_thread(const std::string& stream_name) {
  std::string thread_name = ("strata-" + stream_name).substr(0, 15);
  pthread_setname_np(pthread_self(), thread_name.c_str());
}

}  // namespace

HostStream::HostStream(std::string name, const HostMemory& memory, SharedTransferCounters& counters,
                       std::int64_t queue_depth)
    : name_(std::move(name)),
      memory_(memory),
      counters_(counters),
      slots_(static_cast<std::size_t>(queue_depth)) {
  STRATA_ASSERT(queue_depth > 0);
  worker_ = std::jthread([this](std::stop_token stop) { run(std::move(stop)); });
}

HostStream::~HostStream() {
  // The worker sees the stop request only once the queue is empty: everything queued runs.
  worker_.request_stop();
  worker_.join();
  std::lock_guard lock(mutex_);
  STRATA_ASSERT(queued_ == 0);
  if (error_) {
    base::logger("gpu").error("stream={} destroyed with an error nobody synchronized: {}", name_,
                              strata::describe(error_));
  }
}

void HostStream::copy(void* target, const void* source, std::int64_t bytes, CopyKind kind) {
  STRATA_ASSERT(bytes >= 0);
  check_copy(target, source, bytes, kind);
  enqueue(CopyOp{target, source, bytes, kind});
}

void HostStream::fill_zero(void* target, std::int64_t bytes) {
  STRATA_ASSERT(bytes >= 0);
  memory_.check_live(target, bytes, "fill_zero target", name_);
  enqueue(FillOp{target, bytes});
}

void HostStream::launch(HostTask task) {
  STRATA_ASSERT(static_cast<bool>(task));
  if (!task.is_kernel()) ++host_functions_;
  enqueue(LaunchOp{std::move(task)});
}

void HostStream::record(Event& event) {
  const auto& state = as_host_event(event).state();
  std::int64_t generation = state->begin_record(this, name_);
  enqueue(RecordOp{state, generation});
}

void HostStream::wait(const Event& event) {
  const auto& state = as_host_event(event).state();
  std::int64_t generation = state->recorded();
  if (generation == 0) return;  // never recorded: nothing to wait for, as in CUDA
  enqueue(WaitOp{state, generation});
}

std::exception_ptr HostStream::drain() {
  STRATA_ASSERT(!running_host_task());  // a task would wait for work queued behind it
  std::unique_lock lock(mutex_);
  std::int64_t target = enqueued_total_;
  work_done_.wait(lock, [&] { return completed_total_ >= target; });
  return std::exchange(error_, nullptr);
}

void HostStream::enqueue(Op op) {
  STRATA_ASSERT(!running_host_task());  // a full queue would wait for the task's own stream
  auto capacity = static_cast<std::int64_t>(slots_.size());
  {
    std::unique_lock lock(mutex_);
    // A full queue blocks the producer, as CUDA's launch queue does. A task running on this
    // stream must therefore never enqueue on this same stream.
    space_freed_.wait(lock, [&] { return queued_ < capacity; });
    Slot& slot = slots_[static_cast<std::size_t>((head_ + queued_) % capacity)];
    slot.op = std::move(op);
    if (base::timeline().recording()) slot.label = base::Timeline::current_label();
    queued_ += 1;
    enqueued_total_ += 1;
    STRATA_ASSERT(queued_ <= capacity);
  }
  work_queued_.notify_one();
}

void HostStream::run(std::stop_token stop) {
  name_this_thread(name_);
  auto capacity = static_cast<std::int64_t>(slots_.size());
  std::unique_lock lock(mutex_);
  while (true) {
    // False only when a stop was requested and nothing is queued: the queue is drained.
    if (!work_queued_.wait(lock, stop, [&] { return queued_ > 0; })) return;
    Slot slot = std::exchange(slots_[static_cast<std::size_t>(head_)], Slot{});
    head_ = (head_ + 1) % capacity;
    queued_ -= 1;
    std::exception_ptr upstream = error_;
    lock.unlock();
    space_freed_.notify_one();

    std::exception_ptr failure = base::timeline().recording() ? execute_recorded(slot, upstream)
                                                              : execute(slot.op, upstream);
    slot = Slot{};  // a task's captures are destroyed outside the lock

    lock.lock();
    if (failure && !error_) error_ = std::move(failure);
    completed_total_ += 1;
    work_done_.notify_all();
  }
}

std::exception_ptr HostStream::execute_recorded(Slot& slot, const std::exception_ptr& upstream) {
  const char* kind = nullptr;
  if (const auto* copy_op = std::get_if<CopyOp>(&slot.op)) {
    constexpr const char* kCopies[] = {"copy h2d", "copy d2h", "copy d2d", "copy h2h"};
    kind = kCopies[static_cast<int>(copy_op->kind)];
  } else if (std::holds_alternative<FillOp>(slot.op)) {
    kind = "fill";
  } else if (std::holds_alternative<LaunchOp>(slot.op)) {
    kind = "task";
  } else if (std::holds_alternative<WaitOp>(slot.op)) {
    kind = "wait";
  }
  const auto begin = base::Timeline::Clock::now();
  std::exception_ptr failure = execute(slot.op, upstream);
  // Records are instants: only work and waits take time.
  if (kind != nullptr) {
    base::timeline().add(name_, slot.label.empty() ? std::string(kind) : kind + (" " + slot.label),
                         begin, base::Timeline::Clock::now());
  }
  return failure;
}

std::exception_ptr HostStream::execute(Op& op, const std::exception_ptr& upstream) {
  if (auto* copy_op = std::get_if<CopyOp>(&op)) {
    if (upstream || copy_op->bytes == 0) return nullptr;
    // Checked again here: the buffer may have been freed while the copy waited in the queue.
    check_copy(copy_op->target, copy_op->source, copy_op->bytes, copy_op->kind);
    std::memcpy(copy_op->target, copy_op->source, static_cast<std::size_t>(copy_op->bytes));
    counters_.add(copy_op->kind, copy_op->bytes);
    return nullptr;
  }
  if (auto* fill_op = std::get_if<FillOp>(&op)) {
    if (upstream || fill_op->bytes == 0) return nullptr;
    memory_.check_live(fill_op->target, fill_op->bytes, "fill_zero target", name_);
    std::memset(fill_op->target, 0, static_cast<std::size_t>(fill_op->bytes));
    return nullptr;
  }
  if (auto* launch_op = std::get_if<LaunchOp>(&op)) {
    if (upstream) return nullptr;
    try {
      const HostTaskScope running;
      launch_op->task();
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }
  if (auto* record_op = std::get_if<RecordOp>(&op)) {
    record_op->event->complete(record_op->generation, upstream);
    return nullptr;
  }
  if (auto* wait_op = std::get_if<WaitOp>(&op)) {
    // An error carried by the event becomes this stream's error: work that depended on failed
    // work is skipped too, and the failure is reported here as well.
    std::exception_ptr carried = wait_op->event->wait_for(wait_op->generation);
    return upstream ? nullptr : carried;
  }
  STRATA_ASSERT(false);  // an empty slot was taken from the queue
  return nullptr;
}

void HostStream::check_copy(const void* target, const void* source, std::int64_t bytes,
                            CopyKind kind) const noexcept {
  bool target_on_device = kind == CopyKind::host_to_device || kind == CopyKind::device_to_device;
  bool source_on_device = kind == CopyKind::device_to_host || kind == CopyKind::device_to_device;
  if (target_on_device) memory_.check_live(target, bytes, "copy target", name_);
  if (source_on_device) memory_.check_live(source, bytes, "copy source", name_);
}

}  // namespace strata::gpu::host

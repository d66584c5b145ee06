#pragma once

#include <concepts>
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace strata::gpu {

// A move-only `void()` callable stored inline, never on the heap: a stream's queue slots are
// sized at start-up, so enqueueing a host task during a step allocates nothing (STYLE.md,
// "the step does not allocate"). A callable larger than `capacity_bytes` does not compile;
// capture a pointer to a struct of arguments instead.
class HostTask {
 public:
  // Sixteen pointers: enough for any kernel call (pointers and sizes) captured by value.
  static constexpr std::size_t capacity_bytes = 128;

  HostTask() noexcept = default;

  template <class Function>
  requires(!std::same_as<std::decay_t<Function>, HostTask> &&
           std::invocable<std::decay_t<Function>&>)
      HostTask(Function&& function) {  // NOLINT(google-explicit-constructor): lambdas convert
    using Stored = std::decay_t<Function>;
    static_assert(sizeof(Stored) <= capacity_bytes,
                  "HostTask: the callable is larger than HostTask::capacity_bytes; capture a "
                  "pointer to a struct of arguments instead");
    static_assert(alignof(Stored) <= alignof(std::max_align_t),
                  "HostTask: the callable is over-aligned");
    static_assert(std::is_nothrow_move_constructible_v<Stored>,
                  "HostTask: the callable must be nothrow move constructible");
    ::new (static_cast<void*>(storage_)) Stored(std::forward<Function>(function));
    operations_ = &operations_for<Stored>;
  }

  // A task that stands in for a device kernel or collective: the host backend runs its ops this
  // way. Such a task is not a host function as CUDA knows one (Stream::host_functions does not
  // count it).
  template <class Function>
  static HostTask kernel(Function&& function) {
    HostTask task(std::forward<Function>(function));
    task.kernel_ = true;
    return task;
  }

  HostTask(HostTask&& other) noexcept { take(other); }
  HostTask& operator=(HostTask&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  HostTask(const HostTask&) = delete;
  HostTask& operator=(const HostTask&) = delete;
  ~HostTask() { reset(); }

  // Runs the callable; it must hold one. Exceptions propagate to the caller (the stream's worker,
  // which captures them for the next synchronize()).
  void operator()() { operations_->invoke(storage_); }

  explicit operator bool() const noexcept { return operations_ != nullptr; }
  bool is_kernel() const noexcept { return kernel_; }

  // Destroys the held callable, if any.
  void reset() noexcept {
    if (operations_ != nullptr) {
      operations_->destroy(storage_);
      operations_ = nullptr;
    }
    kernel_ = false;
  }

 private:
  struct Operations {
    void (*invoke)(void* storage);
    void (*move)(void* target, void* source) noexcept;
    void (*destroy)(void* storage) noexcept;
  };

  template <class Stored>
  static constexpr Operations operations_for{
      [](void* storage) { (*std::launder(static_cast<Stored*>(storage)))(); },
      [](void* target, void* source) noexcept {
        Stored* from = std::launder(static_cast<Stored*>(source));
        ::new (target) Stored(std::move(*from));
        from->~Stored();
      },
      [](void* storage) noexcept { std::launder(static_cast<Stored*>(storage))->~Stored(); },
  };

  void take(HostTask& other) noexcept {
    if (other.operations_ != nullptr) {
      other.operations_->move(storage_, other.storage_);
      operations_ = other.operations_;
      other.operations_ = nullptr;
    }
    kernel_ = std::exchange(other.kernel_, false);
  }

  alignas(std::max_align_t) std::byte storage_[capacity_bytes];
  const Operations* operations_ = nullptr;
  bool kernel_ = false;
};

namespace detail {
inline thread_local bool host_task_running = false;
}  // namespace detail

// Whether the calling thread is running a host task's body right now. A host task must never
// wait for work that is enqueued after it (docs/gpu.md, "What a host task may wait for"): a
// queue is bounded, so the thread that would enqueue that work can be stuck behind the task, and
// on CUDA the driver may run every stream's tasks on one thread. So no task enqueues onto a
// stream or synchronizes a stream, an event or the device; both backends assert it there.
inline bool running_host_task() noexcept {
  return detail::host_task_running;
}

// Marks the calling thread as running a host task while it lives: each backend makes one around
// every task it runs.
class HostTaskScope {
 public:
  HostTaskScope() noexcept { detail::host_task_running = true; }
  ~HostTaskScope() { detail::host_task_running = false; }
  HostTaskScope(const HostTaskScope&) = delete;
  HostTaskScope& operator=(const HostTaskScope&) = delete;
};

}  // namespace strata::gpu

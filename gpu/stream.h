#pragma once

#include <cstdint>
#include <exception>
#include <string_view>

#include "gpu/event.h"
#include "gpu/host_task.h"

namespace strata::gpu {

// Which memories a copy joins, as cudaMemcpyKind names them. "Host" is any host memory (pinned
// from `Device::allocate_pinned` for full speed and true asynchrony; pageable also works);
// "device" is memory from `Device::allocate`.
enum class CopyKind { host_to_device, device_to_host, device_to_device, host_to_host };

// "host_to_device", ... (for logs and messages).
std::string_view to_string(CopyKind kind);

// A FIFO queue of work on a device, with CUDA's semantics (cudaStream_t): every call below only
// enqueues and returns at once; the work runs later, in enqueue order, and work on different
// streams runs concurrently unless ordered by events. The memory an op touches must stay alive
// and unchanged (for sources) until the op has run: synchronize, or wait on an event recorded
// after it, before freeing or reusing it.
//
// Errors: an exception thrown by work on the stream (a launched host task) is captured, never
// lost and never thrown from a destructor. It is rethrown by the next `synchronize()` of this
// stream (which then clears it) and by host waits on events recorded after it. The host backend
// skips the stream's remaining copies, fills and tasks until that synchronize() reports the error,
// and passes the error on to streams that wait on such an event; the CUDA backend cannot recall
// work already queued on the GPU, so code must never rely on work after a failure running or not.
//
// Streams are made by a Device (`compute_stream()`, `h2d_stream()`, `d2h_stream()`,
// `create_stream(name)`) and must not outlive it. Destroying a stream first runs all its queued
// work. Enqueueing is thread-safe; a full queue blocks the enqueueing thread until a slot frees
// (CUDA's launch queue does the same).
class Stream {
 public:
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // The name given at creation ("compute", "h2d", "d2h", "comm", ...).
  virtual std::string_view name() const = 0;

  // Copies `bytes` bytes from `source` to `target` (cudaMemcpyAsync). The ranges must not
  // overlap. `kind` says which side is device memory; in debug builds the host backend checks
  // that each device side lies inside a live allocation of this device and aborts naming the
  // pointer otherwise (use after free). `bytes` may be zero.
  virtual void copy(void* target, const void* source, std::int64_t bytes, CopyKind kind) = 0;

  // Sets `bytes` bytes of device memory at `target` to zero (cudaMemsetAsync).
  virtual void fill_zero(void* target, std::int64_t bytes) = 0;

  // Runs `task` on the host in stream order (cudaLaunchHostFunc on CUDA: the task must not call
  // the device API, and on CUDA it may only touch host memory). The host backend runs its
  // kernels this way. An exception thrown by the task is captured as described above.
  virtual void launch(HostTask task) = 0;

  // Host functions launched on this stream so far: every launch() on CUDA (cudaLaunchHostFunc);
  // on the host backend every launch() but the backend's own ops and collectives
  // (HostTask::kernel). A host function holds the stream's later work until the CPU has run it,
  // so the engine keeps its CPU work off the compute stream (docs/architecture.md, "One training
  // step"), and the tests count these to show it.
  virtual std::int64_t host_functions() const = 0;

  // Captures all work enqueued on this stream so far into `event` (cudaEventRecord).
  virtual void record(Event& event) = 0;

  // Makes later work on this stream wait until `event`'s current point has run, without blocking
  // the host (cudaStreamWaitEvent). An event never recorded is no wait at all.
  virtual void wait(const Event& event) = 0;

  // Blocks the calling host thread until all work enqueued before the call has run; rethrows (and
  // clears) a captured error.
  void synchronize();

 protected:
  Stream() = default;

  // Blocks like synchronize(), then returns (and clears) the captured error, or null, instead of
  // throwing it: Device::synchronize drains every stream before it rethrows the first error.
  virtual std::exception_ptr drain() = 0;

 private:
  friend class Device;
};

}  // namespace strata::gpu

#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "gpu/cuda/cuda_event.h"
#include "gpu/cuda/cuda_stream_timeline.h"
#include "gpu/device.h"
#include "gpu/stream.h"
#include "gpu/transfer_counters.h"

namespace strata::gpu::cuda {

class CudaStream;

// Who keeps the list of a device's streams (for Device::synchronize).
class StreamRegistry {
 public:
  virtual void add(CudaStream* stream) = 0;
  virtual void remove(CudaStream* stream) noexcept = 0;

 protected:
  StreamRegistry() = default;
  StreamRegistry(const StreamRegistry&) = default;
  StreamRegistry& operator=(const StreamRegistry&) = default;
  ~StreamRegistry() = default;
};

// gpu::Stream on a cudaStream_t made with cudaStreamNonBlocking (no implicit ordering with the
// legacy default stream). Copies are cudaMemcpyAsync, except host-to-host copies, which run as
// host tasks (cudaMemcpyAsync between two host buffers is synchronous with the host); fills are
// cudaMemsetAsync; launch is cudaLaunchHostFunc with the HostTask moved to the heap and freed
// after it ran. An exception from a task is kept in StreamFailures: the stream's next
// synchronize() rethrows it, events recorded after it rethrow it, and the stream's later tasks
// are skipped until it is reported. Unlike the host backend, a stream that waits on such an event
// does not take the error (its GPU work cannot be held back anyway).
//
// The CUDA driver may run the host tasks of all streams one at a time on one thread: a task must
// never wait for another stream's task (or for the host to enqueue more work).
//
// While the process's timeline records, every op is timed by events (CudaStreamTimeline) and
// drawn on the stream's row when the stream synchronizes, as the host backend draws its ops;
// kernels, cuBLAS and NCCL calls enqueued on handle() directly are drawn when they go through
// traced().
class CudaStream final : public Stream {
 public:
  // The stream's handle for one call that enqueues on it directly (a kernel launch, cuBLAS,
  // NCCL), drawn on the timeline as one op of `kind`. It must live until the call has been
  // enqueued, which it does as a temporary in the call's own expression, since a temporary lives
  // to the end of its full-expression: `check(kernel(stream.traced("kernel"), ...), ...)`.
  class Traced {
   public:
    Traced(CudaStream& stream, const char* kind)
        : handle_(stream.stream_), op_(stream.timeline_, stream.stream_, kind) {}
    operator cudaStream_t() const noexcept { return handle_; }

   private:
    cudaStream_t handle_;
    CudaStreamTimeline::Op op_;
  };

  // `registry` (may be null) hears of the stream while it lives.
  CudaStream(std::string name, int device_index, SharedTransferCounters& counters,
             StreamRegistry* registry);
  // Waits for everything queued, then destroys the stream; an error nobody synchronized is
  // logged, never thrown.
  ~CudaStream() override;

  std::string_view name() const override { return name_; }
  void copy(void* target, const void* source, std::int64_t bytes, CopyKind kind) override;
  void fill_zero(void* target, std::int64_t bytes) override;
  void launch(HostTask task) override;
  std::int64_t host_functions() const override { return host_functions_.load(); }
  void record(Event& event) override;
  void wait(const Event& event) override;

  // Waits for all work enqueued before the call, then takes the first error (a failed task, or
  // the CUDA error cudaStreamSynchronize returned) without throwing.
  std::exception_ptr drain() noexcept override;

  cudaStream_t handle() const noexcept { return stream_; }
  int device_index() const noexcept { return device_index_; }
  // handle() for one call of `kind` ("kernel", "collective"), drawn on the timeline (above).
  Traced traced(const char* kind) { return Traced(*this, kind); }

 private:
  // cudaLaunchHostFunc of `task`, not drawn as an op of its own (host-to-host copies are tasks).
  void enqueue_task(HostTask task);

  std::string name_;
  int device_index_;
  // Counted when a copy is enqueued, not when it has run (a host function after every copy would
  // stall the copy streams): exact once the streams are synchronized, which is when it is read.
  SharedTransferCounters& counters_;
  StreamRegistry* registry_;
  std::atomic<std::int64_t> host_functions_ = 0;  // launch() calls
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<StreamFailures> failures_ = std::make_shared<StreamFailures>();
  CudaStreamTimeline timeline_{name_, device_index_};
};

// `stream` as a CudaStream; aborts when it comes from another backend.
CudaStream& as_cuda_stream(Stream& stream);

}  // namespace strata::gpu::cuda

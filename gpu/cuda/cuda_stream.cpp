#include "gpu/cuda/cuda_stream.h"

#include <cstring>
#include <utility>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"
#include "gpu/cuda/cuda_check.h"

namespace strata::gpu::cuda {
namespace {

// One launched host task, on the heap from launch() until the CUDA driver has run it.
struct TaskRecord {
  HostTask task;
  std::shared_ptr<StreamFailures> failures;
  std::int64_t number;
};

// cudaHostFn_t: runs on a CUDA driver thread, must not throw or call CUDA.
void run_task(void* user_data) {
  std::unique_ptr<TaskRecord> record(static_cast<TaskRecord*>(user_data));
  // After an unreported failure the stream's tasks are skipped, as on the host backend.
  if (record->failures->failing()) return;
  try {
    const HostTaskScope running;
    record->task();
  } catch (...) {
    record->failures->fail(record->number, std::current_exception());
  }
}

cudaMemcpyKind to_cuda(CopyKind kind) {
  switch (kind) {
    case CopyKind::host_to_device:
      return cudaMemcpyHostToDevice;
    case CopyKind::device_to_host:
      return cudaMemcpyDeviceToHost;
    case CopyKind::device_to_device:
      return cudaMemcpyDeviceToDevice;
    case CopyKind::host_to_host:
      return cudaMemcpyHostToHost;
  }
  return cudaMemcpyDefault;
}

}  // namespace

CudaStream::CudaStream(std::string name, int device_index, SharedTransferCounters& counters,
                       StreamRegistry* registry)
    : name_(std::move(name)),
      device_index_(device_index),
      counters_(counters),
      registry_(registry) {
  use_device(device_index_);
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  if (registry_ != nullptr) registry_->add(this);
}

CudaStream::~CudaStream() {
  if (registry_ != nullptr) registry_->remove(this);
  std::exception_ptr error = drain();
  if (error) {
    base::logger("gpu").error("stream={} destroyed with an error nobody synchronized: {}", name_,
                              strata::describe(error));
  }
  cudaError_t status = cudaStreamDestroy(stream_);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    base::logger("gpu").error("stream={}: {}", name_, cuda::describe(status, "cudaStreamDestroy"));
  }
}

void CudaStream::copy(void* target, const void* source, std::int64_t bytes, CopyKind kind) {
  STRATA_ASSERT(!running_host_task());  // CUDA calls are not allowed in a host function
  STRATA_ASSERT(bytes >= 0);
  if (bytes == 0) return;
  constexpr const char* kinds[] = {"copy h2d", "copy d2h", "copy d2d", "copy h2h"};
  use_device(device_index_);
  const CudaStreamTimeline::Op op(timeline_, stream_, kinds[static_cast<int>(kind)]);
  if (kind == CopyKind::host_to_host) {
    // cudaMemcpyAsync between host buffers runs on the calling thread at once, out of stream
    // order; a host task keeps it in order.
    enqueue_task(
        [target, source, bytes] { std::memcpy(target, source, static_cast<std::size_t>(bytes)); });
  } else {
    check(cudaMemcpyAsync(target, source, static_cast<std::size_t>(bytes), to_cuda(kind), stream_),
          "cudaMemcpyAsync");
  }
  counters_.add(kind, bytes);
}

void CudaStream::fill_zero(void* target, std::int64_t bytes) {
  STRATA_ASSERT(!running_host_task());  // CUDA calls are not allowed in a host function
  STRATA_ASSERT(bytes >= 0);
  if (bytes == 0) return;
  use_device(device_index_);
  const CudaStreamTimeline::Op op(timeline_, stream_, "fill");
  check(cudaMemsetAsync(target, 0, static_cast<std::size_t>(bytes), stream_), "cudaMemsetAsync");
}

void CudaStream::launch(HostTask task) {
  STRATA_ASSERT(!running_host_task());  // CUDA calls are not allowed in a host function
  STRATA_ASSERT(static_cast<bool>(task));
  use_device(device_index_);
  const CudaStreamTimeline::Op op(timeline_, stream_, "task");
  ++host_functions_;
  enqueue_task(std::move(task));
}

void CudaStream::enqueue_task(HostTask task) {
  auto record =
      std::make_unique<TaskRecord>(TaskRecord{std::move(task), failures_, failures_->next_task()});
  check(cudaLaunchHostFunc(stream_, &run_task, record.get()), "cudaLaunchHostFunc");
  (void)record.release();  // run_task owns it now
}

void CudaStream::record(Event& event) {
  STRATA_ASSERT(!running_host_task());  // CUDA calls are not allowed in a host function
  CudaEvent& cuda_event = as_cuda_event(event);
  std::int64_t after = failures_->reported_through();
  std::int64_t through = failures_->last_task();
  use_device(device_index_);
  check(cudaEventRecord(cuda_event.handle(), stream_), "cudaEventRecord");
  cuda_event.on_record(failures_, after, through);
}

void CudaStream::wait(const Event& event) {
  STRATA_ASSERT(!running_host_task());  // CUDA calls are not allowed in a host function
  use_device(device_index_);
  // Drawn from the end of the work before it to the waited-for point: how long the stream stood.
  const CudaStreamTimeline::Op op(timeline_, stream_, "wait");
  // An event never recorded is complete: CUDA makes this no wait, as the contract says.
  check(cudaStreamWaitEvent(stream_, as_cuda_event(event).handle(), 0), "cudaStreamWaitEvent");
}

std::exception_ptr CudaStream::drain() noexcept {
  STRATA_ASSERT(!running_host_task());  // CUDA calls are not allowed in a host function
  std::int64_t through = failures_->last_task();
  // The timeline's spans enqueued so far have run once the synchronize returns: read them then.
  const std::int64_t spans_through = timeline_.close();
  cudaError_t status = cudaStreamSynchronize(stream_);
  std::exception_ptr failure = failures_->take_through(through);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return std::make_exception_ptr(CudaError(status, "cudaStreamSynchronize"));
  }
  timeline_.flush(spans_through);
  return failure;
}

CudaStream& as_cuda_stream(Stream& stream) {
  auto* cuda_stream = dynamic_cast<CudaStream*>(&stream);
  STRATA_ASSERT(cuda_stream != nullptr);
  return *cuda_stream;
}

}  // namespace strata::gpu::cuda

#include "gpu/cuda/cuda_event.h"

#include "base/assert.h"
#include "base/log.h"
#include "gpu/cuda/cuda_check.h"
#include "gpu/host_task.h"

namespace strata::gpu::cuda {

std::int64_t StreamFailures::next_task() {
  std::lock_guard lock(mutex_);
  return ++enqueued_;
}

std::int64_t StreamFailures::last_task() const {
  std::lock_guard lock(mutex_);
  return enqueued_;
}

std::int64_t StreamFailures::reported_through() const {
  std::lock_guard lock(mutex_);
  return reported_through_;
}

void StreamFailures::fail(std::int64_t task, std::exception_ptr error) noexcept {
  std::lock_guard lock(mutex_);
  if (failures_.size() == kept_failures) failures_.pop_front();
  failures_.emplace_back(task, std::move(error));
}

bool StreamFailures::failing() const {
  std::lock_guard lock(mutex_);
  return !failures_.empty() && failures_.back().first > reported_through_;
}

std::exception_ptr StreamFailures::take_through(std::int64_t through) {
  std::lock_guard lock(mutex_);
  std::exception_ptr first;
  for (const auto& [task, error] : failures_) {
    if (task > reported_through_ && task <= through) {
      first = error;
      break;
    }
  }
  reported_through_ = std::max(reported_through_, through);
  return first;
}

std::exception_ptr StreamFailures::find(std::int64_t after, std::int64_t through) const {
  std::lock_guard lock(mutex_);
  for (const auto& [task, error] : failures_) {
    if (task > after && task <= through) return error;
  }
  return nullptr;
}

CudaEvent::CudaEvent(int device_index) : device_index_(device_index) {
  use_device(device_index_);
  check(cudaEventCreateWithFlags(&event_, cudaEventBlockingSync), "cudaEventCreateWithFlags");
}

CudaEvent::~CudaEvent() {
  // Safe with a record still pending: the runtime releases the event once it completes.
  cudaError_t status = cudaSetDevice(device_index_);
  if (status == cudaSuccess) status = cudaEventDestroy(event_);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    base::logger("gpu").error("{}", describe(status, "cudaEventDestroy"));
  }
}

void CudaEvent::on_record(std::shared_ptr<StreamFailures> failures, std::int64_t after,
                          std::int64_t through) {
  std::lock_guard lock(mutex_);
  recorded_ = true;
  failures_ = std::move(failures);
  after_ = after;
  through_ = through;
}

void CudaEvent::synchronize() const {
  STRATA_ASSERT(!running_host_task());
  // Host threads other than the engine's wait on events too (the overlapped optimizer step): a
  // thread without a current device would otherwise make a context on device 0.
  use_device(device_index_);
  check(cudaEventSynchronize(event_), "cudaEventSynchronize");
  std::shared_ptr<StreamFailures> failures;
  std::int64_t after = 0;
  std::int64_t through = 0;
  {
    std::lock_guard lock(mutex_);
    if (!recorded_) return;
    failures = failures_;
    after = after_;
    through = through_;
  }
  // The event has completed, so every host task before its point has run and any failure of
  // theirs is in the list.
  if (std::exception_ptr error = failures->find(after, through)) std::rethrow_exception(error);
}

bool CudaEvent::query() const {
  cudaError_t status = cudaEventQuery(event_);
  if (status == cudaSuccess) return true;
  (void)cudaGetLastError();
  // cudaErrorNotReady: still pending. Any other error is a failed device (never thrown here, by
  // contract): the event counts as complete and synchronize() reports the error.
  return status != cudaErrorNotReady;
}

double CudaEvent::elapsed_ms(const Event& since) const {
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, as_cuda_event(since).event_, event_), "cudaEventElapsedTime");
  return static_cast<double>(ms);
}

CudaEvent& as_cuda_event(Event& event) {
  auto* cuda_event = dynamic_cast<CudaEvent*>(&event);
  STRATA_ASSERT(cuda_event != nullptr);
  return *cuda_event;
}

const CudaEvent& as_cuda_event(const Event& event) {
  const auto* cuda_event = dynamic_cast<const CudaEvent*>(&event);
  STRATA_ASSERT(cuda_event != nullptr);
  return *cuda_event;
}

}  // namespace strata::gpu::cuda

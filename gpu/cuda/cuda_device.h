#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gpu/cuda/cuda_memory.h"
#include "gpu/cuda/cuda_stream.h"
#include "gpu/device.h"
#include "gpu/device_query.h"

namespace strata::gpu::cuda {

// gpu::Device on the CUDA runtime: device memory from a stream-ordered pool under the budget
// (CudaMemory), pinned memory from cudaHostAlloc (CudaPinnedMemory), streams and events on
// cudaStream_t / cudaEvent_t. The mirror of host::HostDevice; see docs/gpu.md.
//
// DeviceOptions::stream_queue_depth does not apply: CUDA's own launch queue bounds each stream.
class CudaDevice final : public Device, private StreamRegistry {
 public:
  // `gpu` is the inventory entry of the card to open; `budget_bytes` > 0.
  CudaDevice(const GpuInfo& gpu, std::int64_t budget_bytes);
  // Drains the three built-in streams; asserts that no created stream, buffer or pinned buffer is
  // still live.
  ~CudaDevice() override;

  std::string name() const override { return name_; }
  DeviceKind kind() const override { return DeviceKind::cuda; }

  std::int64_t budget_bytes() const override { return memory_.budget_bytes(); }
  std::int64_t bytes_in_use() const override { return memory_.bytes_in_use(); }
  std::int64_t peak_bytes_in_use() const override { return memory_.peak_bytes_in_use(); }
  void reset_peak() override { memory_.reset_peak(); }
  std::int64_t pinned_bytes_in_use() const override { return pinned_.bytes_in_use(); }
  TransferCounters transfer_counters() const override { return counters_.snapshot(); }

  DeviceBuffer allocate(std::int64_t bytes, std::string_view what) override;
  PinnedBuffer allocate_pinned(std::int64_t bytes) override;

  Stream& compute_stream() override { return *compute_; }
  Stream& h2d_stream() override { return *h2d_; }
  Stream& d2h_stream() override { return *d2h_; }
  std::unique_ptr<Stream> create_stream(std::string_view name) override;
  std::unique_ptr<Event> create_event() override;

  // The CUDA device ordinal (cudaSetDevice) this device runs on.
  int index() const noexcept { return index_; }

 private:
  void add(CudaStream* stream) override;
  void remove(CudaStream* stream) noexcept override;

  int index_;
  std::string name_;
  CudaMemory memory_;
  CudaPinnedMemory pinned_;
  SharedTransferCounters counters_;

  // After the memories: destroyed (drained) before them.
  std::unique_ptr<CudaStream> compute_;
  std::unique_ptr<CudaStream> h2d_;
  std::unique_ptr<CudaStream> d2h_;
};

// `device` as a CudaDevice; aborts when it is another backend's.
CudaDevice& as_cuda_device(Device& device);

}  // namespace strata::gpu::cuda

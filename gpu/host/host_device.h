#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gpu/device.h"
#include "gpu/host/host_memory.h"
#include "gpu/host/host_pinned_memory.h"
#include "gpu/host/host_stream.h"

namespace strata::gpu::host {

// gpu::Device emulated on host memory: device memory is host memory under a budget
// (HostMemory), pinned memory is mlock'ed (HostPinnedMemory), streams are worker threads
// (HostStream). See docs/gpu.md.
class HostDevice final : public Device {
 public:
  // `options.memory_budget_bytes` 0 means half the machine's RAM. Throws UserError for a negative
  // budget.
  explicit HostDevice(const DeviceOptions& options);
  // Drains the three built-in streams; asserts that no created stream, buffer or pinned buffer is
  // still live.
  ~HostDevice() override;

  std::string name() const override;
  DeviceKind kind() const override { return DeviceKind::host; }

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

 private:
  class CreatedStream;

  std::int64_t queue_depth_;
  HostMemory memory_;
  HostPinnedMemory pinned_;
  SharedTransferCounters counters_;

  // After the memories: destroyed (drained) before them.
  std::unique_ptr<HostStream> compute_;
  std::unique_ptr<HostStream> h2d_;
  std::unique_ptr<HostStream> d2h_;
};

// The budget a host device gets when none is configured: half the machine's RAM.
std::int64_t default_host_budget_bytes();

}  // namespace strata::gpu::host

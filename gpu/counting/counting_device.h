#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gpu/device.h"
#include "gpu/memory_ledger.h"
#include "gpu/transfer_counters.h"

namespace strata::gpu::counting {

// A gpu::Device that runs nothing and counts: the device a plan runs on. `strata estimate` runs
// the engine's own parameter coordinator and gradient reducer on it to find a step's device peak
// for a model this machine could not hold (engine/memory_estimate.cpp).
//
// - Device and pinned buffers are address space only: mapped with no access and no backing, so
//   that a model of any size fits, and code that touches one faults at once rather than reading
//   zeros. The ledgers count them exactly as the other backends do; the budget is unlimited.
// - Streams drop what they are given (copies, fills, kernels, host tasks) and count their copies
//   as enqueued; ops made for this device (gpu::create_ops) are the host backend's, whose kernels
//   are tasks these streams drop.
// - An event is complete as soon as it is recorded: with no work, every point a stream reaches
//   has run. Waits return at once.
//
// Thread-safe as gpu::Device asks.
class CountingDevice final : public Device {
 public:
  CountingDevice();
  // Asserts that no buffer or created stream is left (the ledgers' rule).
  ~CountingDevice() override;

  std::string name() const override { return "counting (plans only, runs nothing)"; }
  DeviceKind kind() const override { return DeviceKind::counting; }

  std::int64_t budget_bytes() const override { return device_ledger_.budget_bytes(); }
  std::int64_t bytes_in_use() const override { return device_ledger_.bytes_in_use(); }
  std::int64_t peak_bytes_in_use() const override { return device_ledger_.peak_bytes_in_use(); }
  void reset_peak() override { device_ledger_.reset_peak(); }
  std::int64_t pinned_bytes_in_use() const override { return pinned_ledger_.bytes_in_use(); }
  TransferCounters transfer_counters() const override { return counters_.snapshot(); }

  DeviceBuffer allocate(std::int64_t bytes, std::string_view what) override;
  PinnedBuffer allocate_pinned(std::int64_t bytes) override;

  Stream& compute_stream() override { return *compute_; }
  Stream& h2d_stream() override { return *h2d_; }
  Stream& d2h_stream() override { return *d2h_; }
  std::unique_ptr<Stream> create_stream(std::string_view name) override;
  std::unique_ptr<Event> create_event() override;

 private:
  class AddressSpace;
  class CountingStream;
  class CreatedStream;

  MemoryLedger device_ledger_;
  MemoryLedger pinned_ledger_;
  std::unique_ptr<AddressSpace> device_space_;
  std::unique_ptr<AddressSpace> pinned_space_;
  SharedTransferCounters counters_;
  std::unique_ptr<Stream> compute_;
  std::unique_ptr<Stream> h2d_;
  std::unique_ptr<Stream> d2h_;
};

}  // namespace strata::gpu::counting

#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/device_buffer.h"
#include "gpu/event.h"
#include "gpu/stream.h"

namespace strata::gpu {

// counting: gpu/counting's device, which runs nothing and counts its memory (plans).
enum class DeviceKind { host, cuda, counting };

// "host", "cuda" or "counting".
std::string_view to_string(DeviceKind kind);

// How to open a device (`open_device`, `create_host_device` in gpu/open_device.h).
struct DeviceOptions {
  // The device memory budget in bytes (config key `strata.device_memory_budget`). 0 means the
  // device's own size: the card's memory on CUDA, half the machine's RAM on the host backend.
  // The budget may be set below the card's size: that is how a small machine trains a model
  // larger than its "GPU" memory.
  std::int64_t memory_budget_bytes = 0;
  // The most ops one stream holds queued; a full queue blocks the enqueueing thread. CUDA's own
  // pending-launch queue is about this deep.
  std::int64_t stream_queue_depth = 1024;
  // Which CUDA device to open when there are several.
  int cuda_device_index = 0;
};

// Bytes moved by stream copies since the device was opened, per direction, counted when a copy
// has run. `strata train` prints these as bytes_h2d / bytes_d2h.
struct TransferCounters {
  std::int64_t bytes_h2d = 0;
  std::int64_t bytes_d2h = 0;
  std::int64_t bytes_d2d = 0;
  std::int64_t bytes_h2h = 0;
};

// A GPU, or the host emulating one, with CUDA's semantics (see docs/gpu.md, the contract):
// budgeted device memory, pinned host memory, FIFO streams, events, asynchronous copies.
//
// Three streams always exist: `compute_stream()` for kernels, `h2d_stream()` and `d2h_stream()`
// for copies in each direction, so that uploads, downloads and compute overlap. More (a comm
// stream) come from `create_stream`. Everything made by a device (buffers, streams, events) must be
// destroyed before it; the host backend asserts that no buffer or stream is left.
//
// Thread-safe: any thread may allocate, free and enqueue.
class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // For people: "host (emulated GPU)", "NVIDIA H100 80GB HBM3".
  virtual std::string name() const = 0;
  virtual DeviceKind kind() const = 0;

  // The device memory budget in bytes: `allocate` never lets bytes_in_use() exceed it.
  virtual std::int64_t budget_bytes() const = 0;
  // Device memory held by live DeviceBuffers, exactly the sum of the sizes asked for.
  virtual std::int64_t bytes_in_use() const = 0;
  // The highest bytes_in_use() since the device was opened or since reset_peak().
  virtual std::int64_t peak_bytes_in_use() const = 0;
  // Starts a new peak at the current bytes_in_use() (per step, for the metrics).
  virtual void reset_peak() = 0;
  // Page-locked host memory held by live PinnedBuffers, in locked bytes (each allocation rounded
  // up to whole 4 KiB pages), which is what counts against RLIMIT_MEMLOCK.
  virtual std::int64_t pinned_bytes_in_use() const = 0;
  // Bytes moved by copies that have run, per direction.
  virtual TransferCounters transfer_counters() const = 0;

  // `bytes` of device memory (at least 256-byte aligned, as cudaMalloc). `what` names the use
  // ("layer 3 weights") for the error message. Throws UserError when the allocation would take
  // bytes_in_use() over budget_bytes(): the message names the request, the budget, what is in use
  // and the config key `strata.device_memory_budget`. `bytes` 0 gives an empty buffer.
  virtual DeviceBuffer allocate(std::int64_t bytes, std::string_view what) = 0;

  // `bytes` of page-locked host memory, 4 KiB aligned. Throws UserError when the operating system
  // refuses to lock that much (RLIMIT_MEMLOCK): the message says how much was asked, the current
  // limit, and how to raise it. `bytes` 0 gives an empty buffer.
  virtual PinnedBuffer allocate_pinned(std::int64_t bytes) = 0;

  virtual Stream& compute_stream() = 0;
  virtual Stream& h2d_stream() = 0;
  virtual Stream& d2h_stream() = 0;

  // Another stream, named for logs and errors ("comm").
  virtual std::unique_ptr<Stream> create_stream(std::string_view name) = 0;

  virtual std::unique_ptr<Event> create_event() = 0;

  // Blocks until all work on all of this device's streams enqueued before the call has run
  // (cudaDeviceSynchronize). Rethrows the first captured error after every stream is idle.
  void synchronize();

 protected:
  Device() = default;

  // Streams from create_stream register here while they live, so that synchronize() drains them
  // too. Each backend's destructor calls expect_no_created_streams() after its built-in streams
  // are gone: a created stream must not outlive its device (logged, then asserted).
  void add_created_stream(Stream& stream);
  void remove_created_stream(Stream& stream) noexcept;
  void expect_no_created_streams() noexcept;

 private:
  std::mutex created_streams_mutex_;
  std::vector<Stream*> created_streams_;  // guarded by created_streams_mutex_
};

}  // namespace strata::gpu

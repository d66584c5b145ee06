#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "gpu/device.h"
#include "gpu/stream.h"

namespace strata::gpu::cuda {

// Device memory an op keeps per stream for its work on that stream (two streams may run the op at
// once), made on first use and grown when a call needs more: the attention backward's delta (dout .
// out per query row), the gradient norm's partial sums, cuBLASLt's workspace, the matmul's fp32
// product where an epilogue could not run. Growing first synchronizes the stream, so the old buffer
// is freed with no work queued on it (the DeviceBuffer rule); it happens on the first steps only.
// The memory counts against the device budget as `what`. Thread-safe.
class StreamScratch {
 public:
  StreamScratch(Device& device, std::string what) : device_(device), what_(std::move(what)) {}

  // At least `bytes` of device memory (256-byte aligned) for work on `stream`, valid until the
  // next call for the same stream or clear(). Take it before the op that uses it starts its
  // timeline span: growing may synchronize the stream.
  void* get(Stream& stream, std::int64_t bytes);

  // Frees every buffer (before the device goes).
  void clear();

 private:
  Device& device_;
  std::string what_;
  std::mutex mutex_;
  std::map<const Stream*, DeviceBuffer> buffers_;
};

}  // namespace strata::gpu::cuda

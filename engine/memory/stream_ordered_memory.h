#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string_view>

#include "gpu/device.h"

namespace strata::engine::memory {

// Device memory that comes and goes with the step (gathered parameters, gradient buffers of the
// modules in flight), given back in stream order: a released buffer is freed only once the work
// enqueued on its stream before the release has run (cudaFreeAsync's rule, kept on any backend
// with an event), and an allocation that would go over the device budget first waits for such
// pending frees, so the budget bounds the live set, not the host's lead over the device.
class StreamOrderedMemory {
 public:
  explicit StreamOrderedMemory(gpu::Device& device) : device_(device) {}
  ~StreamOrderedMemory();
  StreamOrderedMemory(const StreamOrderedMemory&) = delete;
  StreamOrderedMemory& operator=(const StreamOrderedMemory&) = delete;

  // Device memory of `bytes`; throws the device's budget UserError only when the budget is
  // still exceeded after every pending free has completed.
  gpu::DeviceBuffer allocate(std::int64_t bytes, std::string_view what);
  // Frees `buffer` once `stream` has run the work enqueued on it so far.
  void release(gpu::Stream& stream, gpu::DeviceBuffer buffer);
  // Frees every pending buffer, waiting for its stream.
  void drain();

 private:
  struct Pending {
    std::unique_ptr<gpu::Event> done;
    gpu::DeviceBuffer buffer;
  };
  void reap();

  gpu::Device& device_;
  std::deque<Pending> pending_;
};

}  // namespace strata::engine::memory

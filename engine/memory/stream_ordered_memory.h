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
// with an event). An allocation first waits for every pending free, so the host runs at most one
// module ahead of the device and the memory in use at any moment is exactly the live set the
// step's walk predicts (`strata estimate` checks it to the byte at a tight budget), whatever the
// budget: a roomy budget must not report a larger peak than a tight one.
class StreamOrderedMemory {
 public:
  explicit StreamOrderedMemory(gpu::Device& device) : device_(device) {}
  ~StreamOrderedMemory();
  StreamOrderedMemory(const StreamOrderedMemory&) = delete;
  StreamOrderedMemory& operator=(const StreamOrderedMemory&) = delete;

  // Device memory of `bytes`, after every pending free has completed; throws the device's
  // budget UserError when it does not fit.
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
  gpu::Device& device_;
  std::deque<Pending> pending_;
};

}  // namespace strata::engine::memory

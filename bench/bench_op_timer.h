#pragma once

// Times the device's own ops as the engine runs them: on the device's compute stream, on device
// memory. Each call is timed between two events recorded around it on the stream; the calls are
// enqueued back to back, after one untimed call (cuBLASLt's choice of algorithm, the host
// backend's scratch), so that the device never waits for the host between them, and the median
// counts. `strata bench gemm` and `strata bench attention` time their ops through it.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/assert.h"
#include "gpu/device.h"
#include "gpu/ops.h"
#include "gpu/tensor.h"

namespace strata::tools {

class DeviceOpTimer {
 public:
  // `device` and `ops` (of that device) must outlive the timer; `repeats` is the timed calls per
  // figure (asserted positive).
  DeviceOpTimer(gpu::Device& device, gpu::Ops& ops, int repeats);

  // Fills `elements` values of `target` (device memory, a compute type) with random values in
  // [-1, 1), enqueued on the compute stream.
  void fill_random(gpu::Tensor target, std::int64_t elements);

  // Seconds of the median of `repeats` calls of enqueue_call(stream), after one untimed call.
  template <class EnqueueCall>
  double median_seconds(const EnqueueCall& enqueue_call);

  int repeats() const { return static_cast<int>(starts_.size()); }

 private:
  gpu::Device& device_;
  gpu::Ops& ops_;
  // fp32 random values on the device, tiled over every input: an op's speed does not depend on
  // its values, and one block keeps the filling of a 400M-element tensor quick.
  gpu::DeviceBuffer random_block_;
  std::vector<std::unique_ptr<gpu::Event>> starts_;
  std::vector<std::unique_ptr<gpu::Event>> ends_;
};

template <class EnqueueCall>
double DeviceOpTimer::median_seconds(const EnqueueCall& enqueue_call) {
  gpu::Stream& stream = device_.compute_stream();
  enqueue_call(stream);
  for (std::size_t r = 0; r < starts_.size(); ++r) {
    stream.record(*starts_[r]);
    enqueue_call(stream);
    stream.record(*ends_[r]);
  }
  stream.synchronize();
  std::vector<double> seconds;
  for (std::size_t r = 0; r < starts_.size(); ++r)
    seconds.push_back(ends_[r]->elapsed_ms(*starts_[r]) / 1e3);
  STRATA_ASSERT(!seconds.empty());
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace strata::tools

#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "engine/engine.h"
#include "engine/memory/stream_ordered_memory.h"
#include "engine/step_traffic.h"
#include "gpu/device.h"

namespace strata::engine {

// What one training step moved, waited for and held, for its StepStats: the bytes (StepTraffic
// says which step each one counts in), the device allocations and their waits, the device and
// CPU memory held, and the wall time with what calls between steps waited for the step before's
// optimizer. The engine's thread calls it.
class StepMeter {
 public:
  StepMeter(gpu::Device& device, memory::StreamOrderedMemory& memory,
            std::function<TrafficReading()> read)
      : device_(device), memory_(memory), traffic_(std::move(read)) {}

  StepTraffic& traffic() { return traffic_; }
  // A call between two steps waited `seconds` for the last one's optimizer: counted in the next.
  void carry(double seconds) { carried_seconds_ += seconds; }
  // The start of a step: its clock, counters and peaks.
  void begin();
  // The end of a step: `moved` is its bytes (StepTraffic::end_step), `cpu_bytes` the CPU memory
  // the engine holds now.
  void finish(const Traffic& moved, std::int64_t cpu_bytes, StepStats& stats);
  // The highest device memory any step held so far.
  std::int64_t device_peak() const noexcept { return device_peak_; }

 private:
  gpu::Device& device_;
  memory::StreamOrderedMemory& memory_;
  StepTraffic traffic_;
  std::chrono::steady_clock::time_point started_;
  double carried_seconds_ = 0;  // waited for between steps, not yet in a step
  double step_carried_seconds_ = 0;
  std::int64_t waits_before_ = 0;
  std::int64_t allocations_before_ = 0;
  std::int64_t device_peak_ = 0;
};

}  // namespace strata::engine

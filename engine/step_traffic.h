#pragma once

#include <cstdint>
#include <functional>

#include "gpu/device.h"

namespace strata::engine {

// Bytes moved, counter by counter: the device's copies and the NVMe swap traffic.
struct Traffic {
  gpu::TransferCounters transfers;
  std::int64_t nvme_read = 0;
  std::int64_t nvme_write = 0;

  Traffic minus(const Traffic& earlier) const;
  Traffic plus(const Traffic& other) const;
  bool operator==(const Traffic& other) const;
};

// The counters at one moment: everything moved so far, and the part of it an offloaded optimizer
// moved (its states, the gradients it read, the new parameters it wrote to the tier).
struct TrafficReading {
  Traffic all;
  Traffic optimizer;
};

// Which step each byte counts in (StepStats). A step's own work (forward, backward, the
// reductions) runs on the engine's thread; an offloaded optimizer's runs on threads of its own,
// beside backward (strata.overlap_optimizer) and beside the next step's forward
// (zero::LateSubGroups). Read at an arbitrary moment the counters would split that work between
// steps by how far each thread had got, so they are read only where nothing else moves, and
// split there:
// - a step's own bytes run from the end of the last step's own work to the end of its own
//   (end_step: every stream drained, the optimizer not yet running beside the next forward);
// - an optimizer step's bytes run from when the one before finished to when it finishes, and
//   count in the step during which it finishes: its own when it ran before returning, the next
//   one when it ran beside that one's forward (however far the threads got, every sub-group's
//   bytes land in the same step);
// - what the calls between two steps move (an evaluation, a save, a load) counts in no step, but
//   the optimizer work they wait for counts in the next.
// So two runs of the same job count the same bytes in every step.
//
// The engine's thread calls it; `read` is called only at those moments.
class StepTraffic {
 public:
  explicit StepTraffic(std::function<TrafficReading()> read) : read_(std::move(read)) {}

  // The start of a step. Unless an optimizer step runs beside it, what moved since the last
  // end_step (calls between steps) counts in no step.
  void begin_step();
  // An optimizer step has finished and nothing else moves: its bytes count in the next
  // end_step. (Called for one that was left running beside the next forward only once it is
  // settled, and for one that ran before returning right after it.)
  void optimizer_finished();
  // Whether an optimizer step left running beside the next forward has not been counted yet.
  bool optimizer_running() const noexcept { return optimizer_running_; }
  // The end of a step's own work, with every stream drained: the step's bytes (its own and the
  // optimizer step that finished during it). `optimizer_goes_on`: its optimizer step runs on
  // beside the next forward, and counts once settled.
  Traffic end_step(bool optimizer_goes_on);
  // A step failed (nothing of it runs on): it counts nothing, and the next step counts from its
  // own start.
  void forget();

 private:
  std::function<TrafficReading()> read_;
  Traffic own_from_;        // all minus optimizer at the end of the last step's own work
  Traffic optimizer_from_;  // the optimizer's counters when its last step finished
  Traffic finished_;        // finished optimizer steps not yet counted in a step
  bool optimizer_running_ = false;
};

}  // namespace strata::engine

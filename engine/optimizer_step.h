#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/assert.h"
#include "engine/engine.h"
#include "engine/optimizer.h"
#include "engine/step_traffic.h"
#include "engine/zero/flat_layout.h"
#include "engine/zero/grad_reducer.h"
#include "engine/zero/optimizer_states.h"

namespace strata::engine {

// The optimizer's part of a training step (docs/architecture.md, "One training step"): it
// updates the rank's partition from the reducer's gradients and writes the new 16-bit shards to
// the parameter tier. Two implementations: on the device (DeviceOptimizerStep) and offloaded to
// CPU memory or NVMe (OffloadedOptimizerStep), which may start beside backward and finish
// beside the next forward. Engine::train_batch calls the hooks in the order they are declared.
class OptimizerStep {
 public:
  // A range of the partition's states, in CPU memory: fp32 masters and the moments the optimizer
  // keeps (empty spans for those it does not).
  using States = zero::OptimizerStates::SubGroupStates;
  using StatesVisitor = zero::OptimizerStates::StatesVisitor;

  virtual ~OptimizerStep() = default;

  // The reducer is made after the optimizer (it sizes its buffers by where the optimizer runs):
  // it is handed over here, before open() and the first step.
  virtual void connect(zero::GradReducer& reducer) = 0;
  // Once the pool and the swap store are open: takes the memory reserved in them.
  virtual void open() {}

  // After the first micro-batch's forward, before any backward overwrites the gradients: the
  // last step's sub-groups left stepping beside this forward are waited for. Rethrows their
  // failure.
  virtual void settle_late() {}
  // Before the last micro-batch's backward, with the step's guessed hyperparameters (an update
  // the gradients may yet change): the offloaded step may begin beside backward.
  virtual void begin_backward(const StepHyperparameters& guess) { static_cast<void>(guess); }
  // In the last backward, once module `module`'s gradients are reduced.
  virtual void module_final(int module) { static_cast<void>(module); }
  // After backward: updates the partition with `hyper` (a skipped step, stats.skipped, updates
  // nothing), filling stats' sub-group counts. `save`, when set, sees every stepped sub-group's
  // states (a checkpoint saved within the step); the step then runs whole. Returns whether work
  // is left for start_late, to run beside the next forward.
  virtual bool step(const StepHyperparameters& hyper, StepStats& stats,
                    const StatesVisitor& save) = 0;
  // Starts the work step() left, once the step's own bytes are counted.
  virtual void start_late() {}
  // After a failed step: stops what runs beside backward or the next forward, putting back what
  // it kept. Returns whether that left the rank half a step on (the sub-groups stepped beside
  // backward of a step the gradients cannot change stay stepped).
  virtual bool abandon() noexcept { return false; }
  // Shutdown: waits for the sub-groups left beside the next forward, logging their failure.
  virtual void abandon_late() noexcept {}

  // The partition's states, range by range in partition order: `fill` writes their values (from
  // the seed or a checkpoint), and the masters go on to the parameter tier in the storage type.
  virtual void fill_states(const StatesVisitor& fill) = 0;
  // Hands `visit` the states, range by range in partition order (a checkpoint's save).
  virtual void visit_states(const StatesVisitor& visit) = 0;
  // The fp32 masters of the whole partition.
  virtual void read_masters(std::span<float> out) = 0;
  // Whether the step reads and writes every state through the swap file, and no step of it runs
  // beside backward: a checkpoint can then be saved from, and loaded into, the step itself.
  virtual bool streams_states() const { return false; }
  // With streams_states(): the states are read from `fill` by the next step, where it would read
  // them from swap; `finished` runs once it has read them all.
  virtual void fill_states_later(StatesVisitor fill, std::function<void()> finished) {
    static_cast<void>(fill);
    static_cast<void>(finished);
    STRATA_ASSERT(streams_states());
  }
  // A load left its states to the next step (fill_states_later) that has not read them yet.
  virtual bool fills_later() const { return false; }
  // The sub-groups the partition is stepped in.
  virtual const std::vector<zero::Range>& sub_groups() const = 0;

  // A failure left the states neither the old step's nor the new one's.
  virtual bool inconsistent() const { return false; }
  // The NVMe bytes the optimizer's states moved so far (Traffic's nvme counters).
  virtual Traffic moved() const { return {}; }
  virtual std::int64_t nvme_bytes() const { return 0; }
  // CPU memory it holds outside the pool (the rollback window of an overlapped step).
  virtual std::int64_t host_bytes() const { return 0; }
};

}  // namespace strata::engine

#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "aio/aligned_buffer.h"
#include "engine/optimizer.h"
#include "engine/zero/flat_layout.h"
#include "engine/zero/optimizer_states.h"
#include "engine/zero/step_io.h"

namespace strata::engine::zero {

// The step's third stage (docs/architecture.md, "One training step", 3): runs the optimizer over
// a rank's OptimizerStates sub-group by sub-group from a fp32 gradient partition. On NVMe, with
// pipeline_read the next sub-groups are read while the optimizer runs on the current one, with
// pipeline_write finished ones are written while the next runs, without them it is strictly
// read, compute, write; at most buffer_count sub-groups are in flight (one pool buffer each).
//
// With strata.overlap_optimizer the engine steps sub-groups one by one as their gradients become
// final during backward (step_sub_groups), before it knows whether clipping or an overflow will
// change the step; it keeps each such sub-group's prior value and, when the guess was wrong,
// undo_kept() restores and redoes them.
//
// A failed transfer (aio::IoError, ChecksumError) stops the step and marks the states
// inconsistent (OptimizerStates::fail): every later call throws a UserError naming it.
class OptimizerOffload {
 public:
  // The stepper of `states` (which must outlive it), as options.pipeline_read, pipeline_write,
  // keep_capacity and keep_param_bytes_per_element say. Throws UserError for a negative
  // keep_capacity.
  OptimizerOffload(const Optimizer& optimizer, OptimizerStates& states,
                   const OptimizerOffloadOptions& options);
  OptimizerOffload(const OptimizerOffload&) = delete;
  OptimizerOffload& operator=(const OptimizerOffload&) = delete;

  using SubGroupStates = OptimizerStates::SubGroupStates;
  using StatesVisitor = OptimizerStates::StatesVisitor;

  // One optimizer step over the whole partition, sub-group by sub-group; each one's new
  // parameters go to io.params as soon as it is stepped. `stepped` (optional) sees each
  // sub-group's new states, as visit_states hands them, in partition order, while they are
  // still in memory (on NVMe: in the pool buffer, before it is written back), which is how a
  // checkpoint is saved within the step (Engine::plan_checkpoint). It must not throw: a throw
  // fails the step like a swap error.
  void step(const StepHyperparameters& hyper, const StepIo& io, const StatesVisitor& stepped = {});
  // The same with the new parameters written to `copy` (the whole partition, as `copy_type` bit
  // patterns; empty with none) (tests, benchmarks).
  void step(const StepHyperparameters& hyper, std::span<const float> grads, ParamCopy copy_type,
            std::span<std::uint16_t> copy);

  // Steps the sub-groups of `order`, in that order, each once `ready(g)` has returned true; a
  // false stops there, leaving the rest (on NVMe the states read ahead are dropped: a failure).
  // Once `winding_down()` (optional) returns true no further sub-group is begun, but those whose
  // states are already being read are stepped: no read is wasted, so the bytes a whole step moves
  // do not depend on where the stop came. Returns how many were stepped. With `keep_prior`, the
  // states each had before are kept for undo_kept(), and its new parameters wait beside them
  // for commit_kept() instead of going to io.params (so this may run on another thread than the
  // engine's: it never calls the sink); at most keep_capacity of them over all calls until
  // undo_kept or commit_kept. Without, each one's new parameters go to io.params as in step(),
  // from the calling thread. Never runs beside the other calls.
  using Ready = std::function<bool(int sub_group)>;
  using WindingDown = std::function<bool()>;
  int step_sub_groups(const StepHyperparameters& hyper, const StepIo& io,
                      std::span<const int> order, const Ready& ready, bool keep_prior,
                      const WindingDown& winding_down = {});
  // Puts every kept sub-group's states back to their prior value and, when `redo` is not null,
  // steps it again with *redo (its new parameters going to io.params). Then forgets them. Their
  // parameters in io.params were never changed, so without a redo they are the prior ones.
  void undo_kept(const StepHyperparameters* redo, const StepIo& io);
  // The kept sub-groups' step stands: their new parameters go to io.params, and they are
  // forgotten.
  void commit_kept(const StepIo& io);
  std::span<const int> kept() const noexcept { return kept_; }
  // CPU memory of the rollback window (keep_capacity slots).
  std::int64_t rollback_bytes() const noexcept {
    return kept_states_.size_bytes() + kept_params_.size_bytes();
  }

  OptimizerStates& states() const noexcept { return states_; }
  // Most sub-groups in flight at once during the last step (nvme), for tests of buffer_count.
  std::int64_t peak_in_flight() const noexcept { return peak_in_flight_; }

 private:
  // When step_sub_groups' sub-groups may be stepped (step(): at once, all of them).
  struct Pace {
    Ready ready;
    WindingDown winding_down;
  };
  // Steps the sub-groups of `order` as `pace` allows; `stepped` as in step().
  int run_step(const StepHyperparameters& hyper, const StepIo& io, std::span<const int> order,
               const Pace& pace, bool keep_prior, const StatesVisitor& stepped);
  // run_step on NVMe: `step_one` steps a sub-group in a pool buffer.
  using StepOne = std::function<void(int sub_group, std::span<std::byte> bytes)>;
  int run_step_from_nvme(std::span<const int> order, const Pace& pace, const StepOne& step_one);
  // step() with a fill_states_later pending on NVMe: each sub-group is filled where the step
  // would have read it, stepped and written once.
  void fill_and_step(const StepHyperparameters& hyper, const StepIo& io,
                     const StatesVisitor& stepped);
  // Steps sub-group `sub_group` (its states in `bytes`), writing its new parameters to
  // `new_params` (range.size() elements of the storage type; empty: nowhere).
  void compute(int sub_group, std::span<std::byte> bytes, const StepHyperparameters& hyper,
               const StepIo& io, std::span<std::byte> new_params);
  // compute() with the new parameters handed to io.params.
  void compute_into_sink(int sub_group, std::span<std::byte> bytes,
                         const StepHyperparameters& hyper, const StepIo& io);
  // Keeps the sub-group's states before its step in the next slot; returns the slot.
  std::size_t keep(int sub_group, std::span<const std::byte> bytes);
  std::span<std::byte> kept_new_params(std::size_t slot, int sub_group);
  std::span<std::byte> kept_states(std::size_t slot);

  const Optimizer& optimizer_;
  OptimizerStates& states_;
  bool pipeline_read_;
  bool pipeline_write_;
  std::int64_t keep_capacity_;
  std::int64_t keep_param_bytes_per_element_;
  std::int64_t peak_in_flight_ = 0;
  // The rollback window: keep_capacity slots of one extent each (the prior states), and of one
  // sub-group's new parameters (keep_param_bytes_per_element); kept_[k] is the sub-group in slot k.
  std::int64_t kept_extent_bytes_ = 0;
  std::int64_t kept_param_bytes_ = 0;
  aio::AlignedBuffer kept_states_;
  aio::AlignedBuffer kept_params_;
  std::vector<int> kept_;
};

}  // namespace strata::engine::zero

#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/by_index.h"
#include "engine/optimizer.h"
#include "engine/zero/cpu_queue.h"
#include "engine/zero/flat_layout.h"
#include "engine/zero/optimizer_offload.h"

namespace strata::engine::zero {

// What an overlapped step did, for StepStats and the tests.
struct OverlapOutcome {
  int early_sub_groups = 0;  // sub-groups stepped while backward still ran
  bool undone = false;       // the guess was wrong: those were put back (and redone)
  // The sub-groups still to step, first to last (none for a skipped step): LateSubGroups'.
  std::vector<int> unreached;
};

// strata.overlap_optimizer (docs/architecture.md, "One training step", 4): during the last
// micro-batch's backward a thread steps the offloaded optimizer's sub-groups, last first, each as
// soon as the gradients of every module it covers are final, while backward goes on through the
// earlier modules. Backward finishes the partition from its end (modules run in reverse and each
// owns a later slice than the one before it), so the sub-groups become final in reverse order.
//
// The thread has to guess the step's gradient multiplier before the global gradient norm and the
// overflow verdict exist: it guesses "not clipped, not skipped". When a clip or an overflow can
// change the step (Guess::may_change), it keeps the prior value of each sub-group it steps (at
// most the offload's keep_capacity of them, the last ones); after backward, finish() keeps the
// early steps when the real hyperparameters equal the guess bit for bit, else puts those
// sub-groups back and redoes them (or, for a skipped step, leaves them as they were). When
// nothing in the gradients can change the step (Guess::fixed: gradient_clipping 0 and no
// overflow check), the guess is the step: every sub-group may be stepped during backward, nothing
// is kept, and each one's new parameters go to the sink from the thread. Either way the result is
// the same bits as the step run after backward: each sub-group is stepped once, from the same
// prior value, with the same hyperparameters.
//
// The sub-groups not stepped during backward are the first ones, final last and needed first by
// the next forward: finish() names them, and the engine steps them beside that forward
// (engine/zero/late_sub_groups.h).
class OverlappedStep {
 public:
  enum class Guess {
    may_change,  // a clip or a skipped step may prove it wrong: early steps are kept to undo
    fixed,       // the step's multiplier does not depend on the gradients
  };
  // may_change: `offload` keeps up to `window` (<= keep_capacity, >= 1) sub-groups, the last
  // ones, and that many may be stepped early. fixed: every sub-group may be, `window` is
  // ignored, and the sink that begin()'s StepIo names must take ranges from the thread while the
  // engine's thread uses it (ParamTier locks; PartitionMemory's ranges are disjoint).
  // `landings`: the queue whose jobs put the gradients into the partition (the reducer's).
  OverlappedStep(CpuQueue& landings, const FlatLayout& layout, OptimizerOffload& offload,
                 std::int64_t window, Guess guess = Guess::may_change);
  ~OverlappedStep();
  OverlappedStep(const OverlappedStep&) = delete;
  OverlappedStep& operator=(const OverlappedStep&) = delete;

  // Before the last micro-batch's backward: starts the thread with the guessed hyperparameters.
  // `io`'s memory must stay valid until finish().
  void begin(const StepHyperparameters& guess, const StepIo& io);
  // After module `module`'s gradients of the last micro-batch are on their way into the
  // partition, `landed` the queue's job after which they are there: the sub-groups that this
  // makes final may be stepped once that job has run.
  void module_final(int module, CpuQueue::Ticket landed);
  // After backward. `real`: the step's hyperparameters, or null when the step is skipped (never
  // with Guess::fixed, whose real step is the guess). Waits for the thread (rethrowing its error
  // or that of a landing) to step its window, or with Guess::fixed stops it once it has stepped
  // the sub-groups whose states it has begun to read (OptimizerOffload::step_sub_groups) and
  // that backward made final (all of them, after a whole backward); keeps or undoes its steps,
  // and names the sub-groups it did not reach, whose gradients have all landed by then.
  OverlapOutcome finish(const StepHyperparameters* real);

  // After begin() when the step fails before finish(): stops the thread and puts back what it
  // stepped, so the optimizer holds the last step's values. With Guess::fixed nothing was kept:
  // if the thread stepped any sub-group the optimizer is half a step on, and it is marked
  // inconsistent (every later call refuses, naming the run's last checkpoint). Errors are
  // logged, not thrown.
  void abandon() noexcept;
  bool running() const noexcept { return worker_.valid(); }

 private:
  bool wait_final(int sub_group);  // on the thread; false when stopped
  // A failed step's end: puts back the kept sub-groups, or (Guess::fixed) marks the optimizer
  // inconsistent when `stepped` sub-groups of it are already stepped.
  void put_back(int stepped, const std::string& why);

  OptimizerOffload& offload_;
  Guess kind_;
  std::vector<int> first_module_;  // per sub-group: the lowest module it covers
  CpuQueue& landings_;
  base::ByIndex<CpuQueue::Ticket> final_;  // per sub-group, set by module_final
  std::vector<int> early_order_;           // the sub-groups the thread may step
  StepHyperparameters guess_;
  StepIo io_;

  std::mutex mutex_;
  std::condition_variable changed_;
  int final_from_ = 0;     // sub-groups >= this are final (their ticket set)
  bool stopping_ = false;  // the step failed: the thread stops where it is
  // Backward ended (Guess::fixed): the thread steps what it has begun to read, then stops. Set
  // under mutex_ (wait_final waits on it); read without it by the thread's step loop.
  std::atomic<bool> winding_down_ = false;
  // The landing a final ticket waited for failed: the thread stopped there, and the step
  // fails with that error (the optimizer itself is fine once its early steps are put back).
  std::exception_ptr stream_failure_;
  std::future<int> worker_;  // how many sub-groups it stepped
};

}  // namespace strata::engine::zero

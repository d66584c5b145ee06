#pragma once

#include <future>
#include <vector>

#include "engine/optimizer.h"
#include "engine/zero/optimizer_offload.h"
#include "engine/zero/step_io.h"

namespace strata::engine::zero {

// The part of an offloaded optimizer step that runs after backward (docs/zero.md, "The
// sub-groups left after backward are stepped beside the next forward"): backward makes the
// partition final from its end, so what is left are the first sub-groups, the ones the next
// forward needs first. start() has the sink expect their ranges (ParamSink::expect) and steps
// them first to last on a thread of its own, each one's new parameters going to the sink from
// there, while the engine goes on into the next step; its forward gathers a module once the
// sub-groups covering it are committed (ParamTier::wait_committed). The bits are those of the
// same sub-groups stepped before returning: each is stepped once, with the same hyperparameters,
// before anything reads it.
//
// Whoever reads the optimizer's states, the gradients they are stepped from, or the parameters
// outside a forward settles first (the next backward, an evaluation, a save, a load).
class LateSubGroups {
 public:
  explicit LateSubGroups(OptimizerOffload& offload) : offload_(offload) {}
  ~LateSubGroups() { abandon(); }
  LateSubGroups(const LateSubGroups&) = delete;
  LateSubGroups& operator=(const LateSubGroups&) = delete;

  // Steps sub-groups `order` (first to last: ascending) with `hyper` on the thread; nothing when
  // `order` is empty. `io`'s memory must stay valid until settle(). Returns at once.
  void start(const StepHyperparameters& hyper, const StepIo& io, std::vector<int> order);
  // Waits for them and rethrows their failure: a UserError (the optimizer marked itself
  // inconsistent, and the sink's readers were told with the same error and fix). Nothing when
  // none are being stepped.
  void settle();
  // settle() that logs the failure instead (a step failing for another reason, shutdown): the
  // sub-groups are waited for, so the step they finish is whole unless they failed.
  void abandon() noexcept;
  bool running() const noexcept { return thread_.valid(); }

 private:
  OptimizerOffload& offload_;
  StepHyperparameters hyper_;
  StepIo io_;
  std::future<void> thread_;
};

}  // namespace strata::engine::zero

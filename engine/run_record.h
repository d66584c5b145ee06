#pragma once

#include <cstdint>
#include <string>

#include "base/failure_latch.h"

namespace strata::engine {

// Where a run stands, shared by the step and the checkpoints: how far it trained, and whether a
// failure left its states unusable. The first such cause stands; every later call names it.
struct RunRecord {
  std::int64_t steps_taken = 0;      // optimizer steps applied
  std::int64_t batches_trained = 0;  // train_batch calls that finished, skipped steps included
  // Latched once the states are partly overwritten (a load or a step failed part way).
  base::FailureLatch unusable{"{}",
                              "load a checkpoint into a new run (strata train --resume DIR): "
                              "this one's states were partly overwritten"};

  void check_usable() const { unusable.check(); }
};

}  // namespace strata::engine

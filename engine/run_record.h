#pragma once

#include <cstdint>
#include <string>

#include "base/error.h"

namespace strata::engine {

// Where a run stands, shared by the step and the checkpoints: how far it trained, and whether a
// failure left its states unusable. The first such cause stands; every later call names it.
struct RunRecord {
  std::int64_t steps_taken = 0;      // optimizer steps applied
  std::int64_t batches_trained = 0;  // train_batch calls that finished, skipped steps included
  std::string unusable;              // the first cause, once the states are partly overwritten

  // Records `cause` unless one is recorded already; returns the one that stands.
  const std::string& poison(std::string cause) {
    if (unusable.empty()) unusable = std::move(cause);
    return unusable;
  }
  void check_usable() const {
    if (unusable.empty()) return;
    throw UserError(unusable,
                    "load a checkpoint into a new run (strata train --resume DIR): this one's "
                    "states were partly overwritten",
                    1);
  }
};

}  // namespace strata::engine

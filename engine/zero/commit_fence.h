#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/failure_latch.h"
#include "engine/zero/flat_layout.h"
#include "gpu/event.h"

namespace strata::engine::zero {

// The handshake between a thread that commits ranges of the parameter partition later (the
// optimizer's, stepping the sub-groups left after backward: engine/zero/late_sub_groups.h) and
// the engine's thread, which gathers modules meanwhile (the next forward). Before the committing
// thread starts, each range it will commit is expected; a reader of elements an expected range
// covers waits for its commit (wait_for), and fails instead, naming the cause, once the
// committing thread abandons the ranges it has not committed. A commit whose bytes reach the
// device by an upload hands that upload to the first reader, whose stream waits for it; a commit
// without one is forgotten at once.
//
// Thread-safe: expect() and commit() come from the committing thread (expect() before it
// starts), wait_for() and awaits() from the reading one, abandon() from either.
class CommitFence {
 public:
  CommitFence();
  CommitFence(const CommitFence&) = delete;
  CommitFence& operator=(const CommitFence&) = delete;

  // `range` will be committed later, by another thread.
  void expect(Range range);
  // Whether `range` is expected and not committed yet: the committing thread asks before it
  // writes the range, so that it leaves the upload's ordering to the reader's wait_for.
  bool expects(Range range) const;
  // `range` is written: a reader waiting for it goes on. `uploaded`: the copy that brings it to
  // the device, which the reader's stream must wait for (nullptr: none, the range is forgotten).
  // Nothing for a range not expected.
  void commit(Range range, std::shared_ptr<gpu::Event> uploaded);
  // Whether an expected range overlapping `span` is still to be committed (a read of it now
  // would see the old values).
  bool awaits(Range span) const;
  // Blocks until every expected range overlapping `span` is committed, then hands the upload of
  // each to `wait_upload` (the reader's stream waits for it) and forgets those ranges. Throws a
  // UserError naming the abandonment's cause, with its fix, when one of them never will be.
  void wait_for(Range span, const std::function<void(const gpu::Event&)>& wait_upload);
  // The ranges not committed yet never will be (the committing thread failed with `why`, which
  // `fix` fixes; empty: the latch's "training cannot continue from this state"): their readers
  // stop waiting and fail. The first cause stands.
  void abandon(const std::string& why, const std::string& fix);

  // How many times wait_for has waited for a commit so far, and how many uploads of committed
  // ranges it has handed to a reader.
  std::int64_t commit_waits() const;
  std::int64_t upload_waits() const;

 private:
  // An expected range, until its commit (with an upload, until a reader has taken it).
  struct Expected {
    Range range;
    bool committed = false;
    std::shared_ptr<gpu::Event> uploaded;
  };
  bool awaits_locked(Range span) const;  // mutex_ held

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Expected> expected_;
  // Why the ranges still expected will not be committed, once they will not.
  base::FailureLatch abandoned_;
  std::int64_t commit_waits_ = 0;
  std::int64_t upload_waits_ = 0;
};

}  // namespace strata::engine::zero

#include "engine/zero/commit_fence.h"

#include <algorithm>
#include <utility>

#include "base/timeline.h"

namespace strata::engine::zero {

namespace {

bool same(Range a, Range b) {
  return a.begin == b.begin && a.end == b.end;
}

bool overlap(Range a, Range b) {
  return a.begin < b.end && b.begin < a.end;
}

}  // namespace

CommitFence::CommitFence()
    : abandoned_("the optimizer step that was finishing beside this forward failed: {}",
                 "training cannot continue from this state") {}

void CommitFence::expect(Range range) {
  const std::lock_guard lock(mutex_);
  expected_.push_back(Expected{range, false, nullptr});
}

bool CommitFence::expects(Range range) const {
  const std::lock_guard lock(mutex_);
  return std::ranges::any_of(
      expected_, [&](const Expected& e) { return !e.committed && same(e.range, range); });
}

void CommitFence::commit(Range range, std::shared_ptr<gpu::Event> uploaded) {
  {
    // Without an upload the range is forgotten; with one, it is kept until a reader's stream
    // has waited for its copy.
    const std::lock_guard lock(mutex_);
    std::erase_if(expected_, [&](Expected& entry) {
      if (!same(entry.range, range)) return false;
      entry.committed = true;
      entry.uploaded = uploaded;
      return uploaded == nullptr;
    });
  }
  changed_.notify_all();
}

bool CommitFence::awaits(Range span) const {
  const std::lock_guard lock(mutex_);
  return awaits_locked(span);
}

bool CommitFence::awaits_locked(Range span) const {
  return std::ranges::any_of(
      expected_, [&](const Expected& e) { return !e.committed && overlap(e.range, span); });
}

void CommitFence::wait_for(Range span, const std::function<void(const gpu::Event&)>& wait_upload) {
  std::unique_lock lock(mutex_);
  if (expected_.empty()) return;
  if (awaits_locked(span)) {
    ++commit_waits_;
    const base::Timeline::Scope waiting("host", "wait", "optimizer step");
    changed_.wait(lock, [&] { return abandoned_.failed() || !awaits_locked(span); });
    if (awaits_locked(span)) abandoned_.check();
  }
  // The reader's later work is ordered after the copy it waits for: the range is forgotten.
  std::erase_if(expected_, [&](const Expected& e) {
    if (!e.committed || !overlap(e.range, span)) return false;
    wait_upload(*e.uploaded);
    ++upload_waits_;
    return true;
  });
}

void CommitFence::abandon(const std::string& why, const std::string& fix) {
  {
    // Latched under mutex_, so that a reader cannot miss the notification between its check of
    // the predicate and its wait.
    const std::lock_guard lock(mutex_);
    abandoned_.fail(why, fix);
  }
  changed_.notify_all();
}

std::int64_t CommitFence::commit_waits() const {
  const std::lock_guard lock(mutex_);
  return commit_waits_;
}

std::int64_t CommitFence::upload_waits() const {
  const std::lock_guard lock(mutex_);
  return upload_waits_;
}

}  // namespace strata::engine::zero

#pragma once

#include <atomic>
#include <mutex>
#include <string>

namespace strata::base {

// A state that one failure leaves untrustworthy for good (parameter shards or optimizer states
// half written, ranges an optimizer's thread will never commit): the first failure is latched,
// and every later use refuses, naming it. Later failures are usually consequences of the first
// (a step stopped half done makes the next call fail too), so the first cause is the one that
// tells the user what to fix; later fail() calls are ignored.
//
// Thread-safe: an optimizer's thread may fail the state while the engine's thread checks it.
class FailureLatch {
 public:
  // `refusal`: what check() throws, with `{}` where the first cause goes; `fix`: the fix it
  // carries when fail() gave none.
  FailureLatch(std::string refusal, std::string fix);
  FailureLatch(const FailureLatch&) = delete;
  FailureLatch& operator=(const FailureLatch&) = delete;

  // Latches `cause` (and its `fix`, empty for the latch's own) unless a failure already is.
  // Returns whether this call's cause is the one kept.
  bool fail(const std::string& cause, const std::string& fix = {});
  // Whether a failure is latched.
  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  // The first cause (empty while none is latched).
  std::string cause() const;
  // Throws a UserError naming the first cause, with its fix, once a failure is latched.
  void check() const;

 private:
  const std::string refusal_;
  const std::string default_fix_;
  mutable std::mutex mutex_;
  std::string cause_;  // guarded by mutex_
  std::string fix_;    // guarded by mutex_
  // Set, under mutex_, once cause_ holds the first cause: failed() reads it without the lock.
  std::atomic<bool> failed_ = false;
};

}  // namespace strata::base

#include "base/failure_latch.h"

#include <fmt/format.h>

#include <utility>

#include "base/error.h"

namespace strata::base {

FailureLatch::FailureLatch(std::string refusal, std::string fix)
    : refusal_(std::move(refusal)), default_fix_(std::move(fix)) {}

bool FailureLatch::fail(const std::string& cause, const std::string& fix) {
  const std::lock_guard lock(mutex_);
  if (failed_.load(std::memory_order_relaxed)) return false;
  cause_ = cause;
  fix_ = fix.empty() ? default_fix_ : fix;
  failed_.store(true, std::memory_order_release);
  return true;
}

std::string FailureLatch::cause() const {
  const std::lock_guard lock(mutex_);
  return cause_;
}

void FailureLatch::check() const {
  if (!failed()) return;
  const std::lock_guard lock(mutex_);
  throw UserError(fmt::format(fmt::runtime(refusal_), cause_), fix_);
}

}  // namespace strata::base

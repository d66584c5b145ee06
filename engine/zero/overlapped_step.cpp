#include "engine/zero/overlapped_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "base/assert.h"
#include "base/log.h"

namespace strata::engine::zero {
namespace {

// The early steps stand only when they used exactly the step's hyperparameters.
bool same_step(const StepHyperparameters& a, const StepHyperparameters& b) {
  return a.lr == b.lr && a.betas == b.betas && a.step == b.step && a.grad_scale == b.grad_scale;
}

}  // namespace

OverlappedStep::OverlappedStep(CpuQueue& landings, const FlatLayout& layout,
                               OptimizerOffload& offload, std::int64_t window, Guess guess)
    : offload_(offload), kind_(guess), landings_(landings) {
  const std::vector<Range>& groups = offload.states().sub_groups();
  const int n = static_cast<int>(groups.size());
  int module = 0;
  for (const Range& group : groups) {
    while (module + 1 < layout.module_count() &&
           layout.module(module + 1).partition_offset <= group.begin)
      ++module;
    first_module_.push_back(module);
    final_.push_back(0);
  }
  if (kind_ == Guess::fixed) window = n;
  STRATA_ASSERT(window >= 1);
  for (int g = n - 1; g >= std::max<std::int64_t>(0, n - window); --g)
    early_order_.push_back(g);
  final_from_ = n;
}

OverlappedStep::~OverlappedStep() {
  abandon();
}

void OverlappedStep::begin(const StepHyperparameters& guess, const StepIo& io) {
  STRATA_ASSERT(!running());
  guess_ = guess;
  io_ = io;
  {
    std::lock_guard lock(mutex_);
    final_from_ = static_cast<int>(first_module_.size());
    stopping_ = false;
  }
  winding_down_ = false;
  worker_ = std::async(std::launch::async, [this] {
    return offload_.step_sub_groups(
        guess_, io_, early_order_, [this](int g) { return wait_final(g); },
        kind_ == Guess::may_change, [this] { return winding_down_.load(); });
  });
}

void OverlappedStep::module_final(int module, CpuQueue::Ticket landed) {
  if (!running()) return;
  // first_module_ never decreases, so the sub-groups that reach no lower than `module` are a
  // suffix; those past final_from_ were recorded by a later module already.
  const auto suffix = std::lower_bound(first_module_.begin(), first_module_.end(), module);
  const auto lowest = static_cast<int>(suffix - first_module_.begin());
  std::lock_guard lock(mutex_);
  if (lowest >= final_from_) return;
  for (int g = lowest; g < final_from_; ++g)
    final_[g] = landed;
  final_from_ = lowest;
  changed_.notify_all();
}

bool OverlappedStep::wait_final(int sub_group) {
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return stopping_ || winding_down_ || final_from_ <= sub_group; });
    // Winding down, a sub-group read ahead is stepped if backward made it final.
    if (stopping_ || final_from_ > sub_group) return false;
  }
  CpuQueue::Ticket landed = 0;
  {
    std::lock_guard lock(mutex_);
    landed = final_[sub_group];
  }
  try {
    landings_.wait(landed);
  } catch (...) {
    // Backward failed, not the optimizer: stop here rather than fail the optimizer's step.
    stream_failure_ = std::current_exception();
    return false;
  }
  return true;
}

OverlapOutcome OverlappedStep::finish(const StepHyperparameters* real) {
  STRATA_ASSERT(running());
  if (kind_ == Guess::fixed) {
    // Backward is over, every sub-group final: the thread steps those whose states it has begun
    // to read and stops, and what it has not reached is stepped in the order the next forward
    // needs it. (A rollback window is a few sub-groups at the partition's end: that thread steps
    // all of it.)
    {
      std::lock_guard lock(mutex_);
      winding_down_ = true;
    }
    changed_.notify_all();
  }
  OverlapOutcome outcome;
  outcome.early_sub_groups = worker_.get();
  if (!stream_failure_) {
    // The sub-groups left are stepped only from gradients that landed, which the thread, stopped
    // or past its window, has not waited for.
    try {
      landings_.wait(*std::max_element(final_.begin(), final_.end()));
    } catch (...) {
      stream_failure_ = std::current_exception();
    }
  }
  if (stream_failure_) {
    put_back(outcome.early_sub_groups, "backward failed during the step");
    std::rethrow_exception(std::exchange(stream_failure_, nullptr));
  }
  // The engine picks Guess::fixed only where the gradients cannot change the step.
  STRATA_ASSERT(kind_ == Guess::may_change || (real != nullptr && same_step(*real, guess_)));
  if (real != nullptr && same_step(*real, guess_)) {
    offload_.commit_kept(io_);
  } else {
    outcome.undone = outcome.early_sub_groups > 0;
    offload_.undo_kept(real, io_);
  }
  if (real == nullptr) return outcome;
  // The thread stepped a suffix of the sub-groups, last first.
  const int rest = static_cast<int>(first_module_.size()) - outcome.early_sub_groups;
  for (int g = 0; g < rest; ++g)
    outcome.unreached.push_back(g);
  return outcome;
}

void OverlappedStep::put_back(int stepped, const std::string& why) {
  if (kind_ == Guess::may_change) {
    offload_.undo_kept(nullptr, io_);
    return;
  }
  if (stepped > 0) {
    offload_.states().mark_inconsistent(
        fmt::format("{} after {} of the optimizer's {} sub-groups were stepped beside it", why,
                    stepped, first_module_.size()));
  }
}

void OverlappedStep::abandon() noexcept {
  if (!running()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  try {
    const int stepped = worker_.get();
    stream_failure_ = nullptr;  // the caller is already failing with it
    put_back(stepped, "the step failed during backward");
  } catch (const std::exception& error) {
    base::logger("engine").error("stopping an overlapped optimizer step: {}", error.what());
  } catch (...) {
    base::logger("engine").error("stopping an overlapped optimizer step: an unknown error");
  }
}

}  // namespace strata::engine::zero

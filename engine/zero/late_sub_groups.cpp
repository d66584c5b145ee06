#include "engine/zero/late_sub_groups.h"

#include <fmt/format.h>

#include <exception>
#include <string>
#include <utility>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"

namespace strata::engine::zero {

void LateSubGroups::start(const StepHyperparameters& hyper, const StepIo& io,
                          std::vector<int> order) {
  STRATA_ASSERT(!running());
  if (order.empty()) return;
  hyper_ = hyper;
  io_ = io;
  // Said before the thread starts, so that no commit comes before its range is expected.
  if (io_.params != nullptr) {
    for (int g : order)
      io_.params->expect(offload_.sub_groups()[static_cast<std::size_t>(g)]);
  }
  try {
    thread_ = std::async(std::launch::async, [this, order = std::move(order)] {
      try {
        offload_.step_sub_groups(hyper_, io_, order, {}, false);
      } catch (const UserError& error) {
        if (io_.params != nullptr) io_.params->forgo_expected(error.what(), error.fix());
        throw;
      } catch (const std::exception& error) {
        if (io_.params != nullptr) io_.params->forgo_expected(error.what(), "");
        throw;
      }
    });
  } catch (const std::exception& error) {
    // No thread (std::system_error): the step stops half done, and nobody waits for its ranges.
    const std::string why = fmt::format("starting the optimizer's thread failed: {}", error.what());
    offload_.mark_inconsistent(why);
    if (io_.params != nullptr) io_.params->forgo_expected(why, "");
    throw;
  }
}

void LateSubGroups::settle() {
  if (!running()) return;
  thread_.get();
}

void LateSubGroups::abandon() noexcept {
  try {
    settle();
  } catch (const std::exception& error) {
    base::logger("engine").error("the optimizer's sub-groups after backward: {}", error.what());
  }
}

}  // namespace strata::engine::zero

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
  // The sink's readers must not wait for ranges that nobody will commit.
  const auto forgo = [this](const std::string& why, const std::string& fix) {
    if (io_.params != nullptr) io_.params->forgo_expected(why, fix);
  };
  try {
    // Said before the thread starts, so that no commit comes before its range is expected.
    if (io_.params != nullptr) {
      for (int g : order)
        io_.params->expect(offload_.states().range_of(g));
    }
    thread_ = std::async(std::launch::async, [this, forgo, order = std::move(order)] {
      try {
        offload_.step_sub_groups(hyper_, io_, order, {}, false);
      } catch (const UserError& error) {
        forgo(error.what(), error.fix());
        throw;
      } catch (const std::exception& error) {
        forgo(error.what(), "");
        throw;
      } catch (...) {
        forgo("the optimizer step failed", "");
        throw;
      }
    });
  } catch (const std::exception& error) {
    // No thread (std::system_error): the step stops half done.
    const std::string why =
        fmt::format("starting the thread of the optimizer's step failed: {}", error.what());
    const std::string fix =
        "let the process start threads (its ulimit -u, the machine's free memory)";
    offload_.states().mark_inconsistent(why);
    forgo(why, fix);
    throw UserError(why, fix + "; training cannot continue from this state");
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

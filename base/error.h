#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace strata {

// An error the user can cause and fix: a bad config value, a missing swap directory, a locked
// memory limit too low. `what()` names the cause; `fix()` says what to do about it. Only tools/
// catches these, prints both and exits non-zero; library code never exits.
//
// `exit_status` follows the CLI's convention: 1 for a failure of the work, 2 for bad usage or a
// bad config (ConfigError passes 2).
class UserError : public std::runtime_error {
 public:
  UserError(const std::string& cause, std::string fix, int exit_status = 1)
      : std::runtime_error(cause), fix_(std::move(fix)), exit_status_(exit_status) {}

  const std::string& fix() const noexcept { return fix_; }
  int exit_status() const noexcept { return exit_status_; }

 private:
  std::string fix_;
  int exit_status_;
};

// The fix an error carries when it is a UserError (an I/O error's: free space, check the
// drive), else `otherwise`: so that wrapping an error keeps what the user can do about it.
inline std::string fix_of(const std::exception& error,
                          const std::string& otherwise = "check the disk and the system log") {
  const auto* user = dynamic_cast<const UserError*>(&error);
  return user != nullptr ? user->fix() : otherwise;
}

// What a captured exception says, for a log line: its what(), or that it is of no std type.
inline std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& exception) {
    return exception.what();
  } catch (...) {
    return "an exception of unknown type";
  }
}

}  // namespace strata

#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace strata::tools {

// A progress line on standard error for work measured in bytes: redrawn in place on a terminal
// at most ten times a second, and printed at every tenth of the way elsewhere (a log file).
class ProgressLine {
 public:
  explicit ProgressLine(std::string what);
  void show(std::size_t done, std::size_t total);
  // Ends the line (on a terminal) after the last show().
  void finish();

 private:
  std::string what_;
  bool terminal_;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point drawn_;
  int tenths_shown_ = -1;
};

}  // namespace strata::tools

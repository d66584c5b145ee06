#include "tools/tokenize_progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace strata::tools {

ProgressLine::ProgressLine(std::string what)
    : what_(std::move(what)),
      terminal_(isatty(STDERR_FILENO) != 0),
      started_(std::chrono::steady_clock::now()),
      drawn_(started_) {}

void ProgressLine::show(std::size_t done, std::size_t total) {
  const auto now = std::chrono::steady_clock::now();
  const double fraction = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
  const double seconds = std::chrono::duration<double>(now - started_).count();
  const double mb_per_s = seconds > 0 ? static_cast<double>(done) / 1e6 / seconds : 0.0;
  const std::string line =
      fmt::format("{} {:5.1f}% ({:.1f} of {:.1f} MB, {:.1f} MB/s)", what_, 100.0 * fraction,
                  static_cast<double>(done) / 1e6, static_cast<double>(total) / 1e6, mb_per_s);
  if (terminal_) {
    if (now - drawn_ < std::chrono::milliseconds(100) && done < total) return;
    drawn_ = now;
    const int width = 30;
    const int filled = static_cast<int>(fraction * width);
    std::fprintf(stderr, "\r[%s%s] %s", std::string(static_cast<std::size_t>(filled), '#').c_str(),
                 std::string(static_cast<std::size_t>(width - filled), ' ').c_str(), line.c_str());
    return;
  }
  const int tenths = static_cast<int>(fraction * 10);
  if (tenths == tenths_shown_) return;
  tenths_shown_ = tenths;
  std::fprintf(stderr, "%s\n", line.c_str());
}

void ProgressLine::finish() {
  if (terminal_) std::fprintf(stderr, "\n");
}

}  // namespace strata::tools

#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>

namespace strata::engine::testing {

// A swap directory of one test, unique in the process and across processes (pid and a counter),
// removed with everything under it.
class SwapDirectory {
 public:
  SwapDirectory() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("strata-engine-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~SwapDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  SwapDirectory(const SwapDirectory&) = delete;
  SwapDirectory& operator=(const SwapDirectory&) = delete;
  std::string string() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace strata::engine::testing

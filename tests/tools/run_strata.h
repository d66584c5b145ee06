#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace strata::tools::testing {

// What one run of the strata binary printed and returned.
struct RunResult {
  int exit_status = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs STRATA_BINARY with `arguments` (each passed as one shell-quoted word) and waits for it.
// `stdin_file`, when not empty, is its standard input.
RunResult run_strata(const std::vector<std::string>& arguments,
                     const std::filesystem::path& stdin_file = {});

// A fresh directory under the system temp directory, removed with everything in it on
// destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Writes `text` to `name` inside the directory and returns its path.
  std::filesystem::path write(const std::string& name, const std::string& text) const;

 private:
  std::filesystem::path path_;
};

}  // namespace strata::tools::testing

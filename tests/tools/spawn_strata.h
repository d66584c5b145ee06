#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/tools/run_strata.h"

namespace strata::tools::testing {

// The strata binary (STRATA_BINARY) started as a child process with its stdout and stderr on
// pipes, for tests that must act while it runs (send it SIGINT after it printed a line). Output is
// read by polling the pipes with a deadline, never by sleeping. The destructor kills and reaps a
// child that is still running.
class SpawnedStrata {
 public:
  explicit SpawnedStrata(const std::vector<std::string>& arguments);
  ~SpawnedStrata();
  SpawnedStrata(const SpawnedStrata&) = delete;
  SpawnedStrata& operator=(const SpawnedStrata&) = delete;

  // Reads output until stdout contains `text` (true) or until `timeout` passes or the child
  // closes its stdout (false).
  bool wait_for_output(const std::string& text, std::chrono::milliseconds timeout);
  // Sends SIGINT, as Ctrl-C on a terminal does.
  void interrupt();
  // Sends `sig` to the child while it runs (SIGTERM as a scheduler does, SIGKILL as a crash).
  void signal(int sig);
  // Reads the rest of the output and reaps the child; a child still running after `timeout` is
  // killed (exit_status 128 + SIGKILL).
  RunResult wait(std::chrono::milliseconds timeout);

  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

 private:
  // Moves whatever the pipes hold into out_/err_, waiting at most until `deadline`; false once
  // both pipes are closed.
  bool pump(std::chrono::steady_clock::time_point deadline);

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_;
  std::string err_;
};

}  // namespace strata::tools::testing

#pragma once

// How `strata train` stops on SIGTERM (a scheduler preempting the job) and SIGINT (Ctrl-C): the
// step in flight finishes, the run saves when it has a save directory, and the process exits
// 143 or 130, as a shell reports a process those signals ended. A second signal ends it at once.

namespace strata::gpu {
class Comm;
class Device;
}  // namespace strata::gpu

namespace strata::tools {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the defaults
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The signal that asked this rank to stop, or 0. With several ranks the answer is the same on
  // every rank (a collective: the highest signal any rank has seen), so that they all stop after
  // the same step and save together.
  int requested(gpu::Comm& comm, gpu::Device& device) const;
  // 143 for SIGTERM, 130 for SIGINT.
  static int exit_status(int signal);
  // "SIGTERM" or "SIGINT".
  static const char* name(int signal);
};

}  // namespace strata::tools

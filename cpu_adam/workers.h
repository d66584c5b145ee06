#pragma once

// The threads the CPU optimizers run on: a oneTBB arena of a fixed size, optionally bound with
// hwloc to the cores of one NUMA node, so that the optimizer's threads sit beside the memory that
// holds the optimizer states (allocate and first-touch those from inside run()).

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace strata::cpu_adam {

struct WorkersOptions {
  int threads = 0;  // 0: one per core the process may use (or per core of the node)
  std::optional<int> numa_node = std::nullopt;  // bind to this node's cores; nullopt: no binding
};

class Workers {
 public:
  // Throws UserError when `threads` is negative, or `numa_node` does not exist on this machine
  // or has no core this process may run on.
  explicit Workers(const WorkersOptions& options);
  ~Workers();
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  // Runs `work` on the calling thread inside the arena: every cpu_adam call it makes spreads over
  // this arena's threads (and only those). Returns when `work` and all its tasks have finished.
  void run(const std::function<void()>& work);

  int thread_count() const;

  // For logs and benchmarks: "unbound" or "numa node 0 (cores 0-15)".
  const std::string& binding() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::cpu_adam

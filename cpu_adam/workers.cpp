// Workers: a TBB arena of fixed size; with a NUMA node, a task_scheduler_observer binds every
// thread that enters the arena to the node's cores with hwloc, and unbinds it when it leaves.

#include "cpu_adam/workers.h"

#include <fmt/format.h>
#include <hwloc.h>
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/task_arena.h>
#include <tbb/task_scheduler_observer.h>

#include <cstdlib>

#include "base/assert.h"
#include "base/error.h"
#include "base/log.h"

namespace strata::cpu_adam {
namespace {

// Owns an hwloc topology and the two cpusets the binding needs.
struct Topology {
  hwloc_topology_t topology = nullptr;
  hwloc_bitmap_t node_cpus = nullptr;  // the node's cores this process may use
  hwloc_bitmap_t original = nullptr;   // the process binding before any thread was bound

  Topology() {
    STRATA_ASSERT(hwloc_topology_init(&topology) == 0);
    STRATA_ASSERT(hwloc_topology_load(topology) == 0);
    node_cpus = hwloc_bitmap_alloc();
    original = hwloc_bitmap_alloc();
    STRATA_ASSERT(node_cpus != nullptr && original != nullptr);
    if (hwloc_get_cpubind(topology, original, HWLOC_CPUBIND_PROCESS) != 0) {
      hwloc_bitmap_copy(original, hwloc_topology_get_allowed_cpuset(topology));
    }
  }
  ~Topology() {
    hwloc_bitmap_free(original);
    hwloc_bitmap_free(node_cpus);
    hwloc_topology_destroy(topology);
  }
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;
};

class Binder final : public tbb::task_scheduler_observer {
 public:
  Binder(tbb::task_arena& arena, const Topology& topology)
      : tbb::task_scheduler_observer(arena), topology_(topology) {
    observe(true);
  }
  ~Binder() override { observe(false); }
  Binder(const Binder&) = delete;
  Binder& operator=(const Binder&) = delete;

  // A failed binding costs speed, not correctness: warn once per thread and run unbound.
  void on_scheduler_entry(bool /*is_worker*/) override {
    if (hwloc_set_cpubind(topology_.topology, topology_.node_cpus, HWLOC_CPUBIND_THREAD) != 0) {
      base::logger("cpu_adam").warn("hwloc could not bind a worker thread; running unbound");
    }
  }
  void on_scheduler_exit(bool /*is_worker*/) override {
    hwloc_set_cpubind(topology_.topology, topology_.original, HWLOC_CPUBIND_THREAD);
  }

 private:
  const Topology& topology_;
};

std::string describe_cpus(hwloc_const_bitmap_t cpus) {
  char* text = nullptr;
  hwloc_bitmap_list_asprintf(&text, cpus);
  std::string described = text != nullptr ? text : "?";
  std::free(text);
  return described;
}

}  // namespace

struct Workers::Impl {
  std::unique_ptr<Topology> topology;
  std::unique_ptr<tbb::global_control> allow_more_threads;
  std::unique_ptr<tbb::task_arena> arena;
  std::unique_ptr<Binder> binder;
  int threads = 0;
  std::string binding = "unbound";
};

Workers::Workers(const WorkersOptions& options) : impl_(std::make_unique<Impl>()) {
  if (options.threads < 0) {
    throw UserError(fmt::format("the optimizer thread count is {}; it must be >= 1, or 0 for one "
                                "thread per core",
                                options.threads),
                    "pass a thread count of at least 1 (or 0 for the default)", 2);
  }
  int threads = options.threads;
  if (options.numa_node) {
    impl_->topology = std::make_unique<Topology>();
    Topology& topology = *impl_->topology;
    const int node_index = *options.numa_node;
    hwloc_obj_t node = node_index < 0 ? nullptr
                                      : hwloc_get_numanode_obj_by_os_index(
                                            topology.topology, static_cast<unsigned>(node_index));
    if (node != nullptr) {
      hwloc_bitmap_and(topology.node_cpus, node->cpuset,
                       hwloc_topology_get_allowed_cpuset(topology.topology));
      hwloc_bitmap_and(topology.node_cpus, topology.node_cpus, topology.original);
    }
    if (node == nullptr || hwloc_bitmap_iszero(topology.node_cpus)) {
      const int nodes = hwloc_get_nbobjs_by_type(topology.topology, HWLOC_OBJ_NUMANODE);
      throw UserError(
          fmt::format("NUMA node {} does not exist or has no core this process may use (this "
                      "machine has {} node(s))",
                      node_index, nodes),
          fmt::format("choose a NUMA node from 0 to {}, or do not bind", nodes - 1), 2);
    }
    if (threads == 0) {
      threads = hwloc_get_nbobjs_inside_cpuset_by_type(topology.topology, topology.node_cpus,
                                                       HWLOC_OBJ_CORE);
      if (threads <= 0) threads = hwloc_bitmap_weight(topology.node_cpus);
    }
    impl_->binding =
        fmt::format("numa node {} (cpus {})", node_index, describe_cpus(topology.node_cpus));
  }
  if (threads == 0) threads = tbb::info::default_concurrency();
  impl_->threads = threads;
  // TBB caps its workers at one per core unless told otherwise; an arena asked for more threads
  // than cores (tests of reproducibility, oversubscription experiments) must really get them.
  if (threads > tbb::info::default_concurrency()) {
    impl_->allow_more_threads = std::make_unique<tbb::global_control>(
        tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
  }
  impl_->arena = std::make_unique<tbb::task_arena>(threads);
  impl_->arena->initialize();
  if (impl_->topology) impl_->binder = std::make_unique<Binder>(*impl_->arena, *impl_->topology);
}

Workers::~Workers() {
  // The observer must stop before the arena and topology it refers to go away.
  impl_->binder.reset();
  impl_->arena.reset();
  impl_->allow_more_threads.reset();
}

void Workers::run(const std::function<void()>& work) {
  impl_->arena->execute(work);
}

int Workers::thread_count() const {
  return impl_->threads;
}

const std::string& Workers::binding() const {
  return impl_->binding;
}

}  // namespace strata::cpu_adam

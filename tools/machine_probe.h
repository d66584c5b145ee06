#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gpu/pinned_limit.h"

namespace strata::tools {

// The processor as offloaded training cares about it: CPU Adam runs the AVX-512 kernel where the
// CPU has it, AVX2 otherwise, and binds its threads per NUMA node.
struct CpuFacts {
  std::string model;       // "Intel(R) Xeon(R) Platinum 8480C", or "unknown"
  std::string simd_level;  // "AVX-512", "AVX2" or "scalar"
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  int packages = 0;         // sockets, from hwloc (0 when hwloc failed)
  int physical_cores = 0;   // from hwloc
  int logical_cpus = 0;     // hardware threads, from hwloc
  int numa_nodes = 0;       // from hwloc
  std::string hwloc_error;  // empty when the topology loaded
};

// Host memory: what pinned pools and CPU-resident optimizer states can use.
struct MemoryFacts {
  std::int64_t total_bytes = 0;                    // sysinfo()
  std::int64_t available_bytes = 0;                // MemAvailable from /proc/meminfo
  std::optional<std::int64_t> cgroup_limit_bytes;  // memory.max of this cgroup, when set
  // What this process may lock (RLIMIT_MEMLOCK, lifted by CAP_IPC_LOCK): the same answer a run
  // decides its pin_memory by.
  gpu::PinnedLimit pinned_limit;

  // What a job on this machine may use: the smaller of RAM and the cgroup limit.
  std::int64_t usable_bytes() const;
};

// Whether this process may set up an io_uring (seccomp, io_uring_disabled and old kernels refuse).
struct IoUringFacts {
  bool available = false;
  std::string error;           // strerror of the refusal, empty when available
  std::string kernel_release;  // uname -r
};

// The swap directory: its file system, its room and whether O_DIRECT works there.
struct PathFacts {
  std::string path;
  bool exists = false;          // an existing directory
  std::string error;            // why the path could not be examined, empty when it could
  std::string fs_type;          // "ext4/ext3/ext2", "xfs", "tmpfs", ... or "unknown (0x...)"
  std::string block_device;     // "nvme0n1p2" when /sys names it, else empty
  std::int64_t free_bytes = 0;  // available to this user (f_bavail)
  std::int64_t total_bytes = 0;
  bool o_direct_ok = false;    // an aligned O_DIRECT write and read-back succeeded
  std::string o_direct_error;  // the step and errno text when it did not
};

CpuFacts probe_cpu();
MemoryFacts probe_memory();

// Sets up and tears down an 8-entry ring.
IoUringFacts probe_io_uring();

// Never throws: every failure is recorded in the returned facts. The O_DIRECT check writes one
// 4 KiB block to a fresh temporary file in `path` and removes it.
PathFacts probe_path(const std::string& path);

// Free space for this user at `path` (statfs f_bavail), without writing anything; nullopt when
// the path cannot be examined.
std::optional<std::int64_t> free_bytes_at(const std::string& path);

}  // namespace strata::tools

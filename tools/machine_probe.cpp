#include "tools/machine_probe.h"

#include <fcntl.h>
#include <hwloc.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysinfo.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace strata::tools {
namespace {

std::string errno_text(int error) {
  return std::strerror(error);
}

std::string trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\n' || text.back() == '\t'))
    text.remove_suffix(1);
  return std::string(text);
}

// The brand string cpuid leaves 0x80000002..4 hold; /proc/cpuinfo on other architectures.
std::string cpu_model() {
#if defined(__x86_64__) || defined(__i386__)
  std::array<unsigned, 12> words{};
  unsigned max_leaf = __get_cpuid_max(0x80000000u, nullptr);
  if (max_leaf >= 0x80000004u) {
    for (unsigned leaf = 0; leaf < 3; ++leaf) {
      __get_cpuid(0x80000002u + leaf, &words[leaf * 4], &words[leaf * 4 + 1], &words[leaf * 4 + 2],
                  &words[leaf * 4 + 3]);
    }
    std::string brand(sizeof(words), '\0');
    std::memcpy(brand.data(), words.data(), sizeof(words));
    brand.resize(std::strlen(brand.c_str()));
    std::string model = trim(brand);
    if (!model.empty()) return model;
  }
#endif
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    for (std::string_view key : {"model name", "Model", "cpu model"}) {
      if (line.rfind(key, 0) == 0) {
        auto colon = line.find(':');
        if (colon != std::string::npos) return trim(std::string_view(line).substr(colon + 1));
      }
    }
  }
  return "unknown";
}

void probe_simd(CpuFacts& facts) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  facts.avx512f = __builtin_cpu_supports("avx512f");
  facts.avx512bw = __builtin_cpu_supports("avx512bw");
  facts.avx512vl = __builtin_cpu_supports("avx512vl");
  facts.avx2 = __builtin_cpu_supports("avx2");
  facts.fma = __builtin_cpu_supports("fma");
  // clang 14's __builtin_cpu_supports does not know "f16c": CPUID leaf 1, ECX bit 29.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0) facts.f16c = (ecx & bit_F16C) != 0;
#endif
  // The same rule as cpu_adam::best_isa(): the AVX-512 Adam kernel needs F, BW (bf16 shifts) and
  // VL; the AVX2 kernel needs FMA and F16C as well.
  if (facts.avx512f && facts.avx512bw && facts.avx512vl) {
    facts.simd_level = "AVX-512";
  } else if (facts.avx2 && facts.fma && facts.f16c) {
    facts.simd_level = "AVX2";
  } else {
    facts.simd_level = "scalar";
  }
}

void probe_topology(CpuFacts& facts) {
  hwloc_topology_t topology = nullptr;
  if (hwloc_topology_init(&topology) != 0) {
    facts.hwloc_error = fmt::format("hwloc_topology_init: {}", errno_text(errno));
    return;
  }
  if (hwloc_topology_load(topology) != 0) {
    facts.hwloc_error = fmt::format("hwloc_topology_load: {}", errno_text(errno));
    hwloc_topology_destroy(topology);
    return;
  }
  facts.packages = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PACKAGE);
  facts.physical_cores = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE);
  facts.logical_cpus = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PU);
  facts.numa_nodes = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
  hwloc_topology_destroy(topology);
}

// A value from /proc/meminfo in bytes ("MemAvailable:   123456 kB"), or -1.
std::int64_t meminfo_bytes(std::string_view key) {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind(key, 0) == 0 && line.size() > key.size() && line[key.size()] == ':') {
      return std::strtoll(line.c_str() + key.size() + 1, nullptr, 10) * 1024;
    }
  }
  return -1;
}

// cgroup v2 "memory.max" of this process ("max" or a number), or cgroup v1's limit.
std::optional<std::int64_t> cgroup_memory_limit() {
  std::ifstream cgroup_file("/proc/self/cgroup");
  std::string line;
  std::string group;
  while (std::getline(cgroup_file, line)) {
    if (line.rfind("0::", 0) == 0) group = line.substr(3);
  }
  for (const std::string& path :
       {fmt::format("/sys/fs/cgroup{}/memory.max", group), std::string("/sys/fs/cgroup/memory.max"),
        std::string("/sys/fs/cgroup/memory/memory.limit_in_bytes")}) {
    std::ifstream limit_file(path);
    std::string value;
    if (!(limit_file >> value) || value == "max") continue;
    char* end = nullptr;
    long long limit = std::strtoll(value.c_str(), &end, 10);
    // cgroup v1 writes "no limit" as a number near 2^63.
    if (end != value.c_str() && limit > 0 && limit < (std::int64_t{1} << 60)) return limit;
  }
  return std::nullopt;
}

// statfs magic numbers (linux/magic.h and the file systems' own headers).
std::string fs_type_name(std::int64_t magic) {
  struct Known {
    std::int64_t magic;
    const char* name;
  };
  static constexpr Known known[] = {
      {0xEF53, "ext4/ext3/ext2"},
      {0x58465342, "xfs"},
      {0x9123683E, "btrfs"},
      {0x01021994, "tmpfs"},
      {0x858458F6, "ramfs"},
      {0x794C7630, "overlayfs"},
      {0x6969, "nfs"},
      {0x2FC12FC1, "zfs"},
      {0xF2F52010, "f2fs"},
      {0x65735546, "fuse"},
      {0x01021997, "9p"},
      {0xFF534D42, "cifs"},
      {0xFE534D42, "smb2"},
      {0x00C36400, "ceph"},
      {0x0BD00BD0, "lustre"},
      {0x47504653, "gpfs"},
      {0x73717368, "squashfs"},
      {0x4D44, "vfat"},
      {0x2011BAB0, "exfat"},
      {0x5346544E, "ntfs"},
      {0x9FA0, "proc"},
      {0x62656572, "sysfs"},
      {0x6E736673, "nsfs"},
      {0x3153464A, "jfs"},
      {0x52654973, "reiserfs"},
      {0x5A3C69F0, "aufs"},
      {0x013111A8, "ibrix"},
  };
  for (const Known& entry : known) {
    if (entry.magic == magic) return entry.name;
  }
  return fmt::format("unknown (0x{:x})", magic);
}

// The block device under a path, from /sys/dev/block/<major>:<minor> (empty for overlay and
// network file systems, whose device numbers are anonymous).
std::string block_device_of(dev_t device) {
  std::string link = fmt::format("/sys/dev/block/{}:{}", major(device), minor(device));
  std::array<char, 512> target{};
  ssize_t length = ::readlink(link.c_str(), target.data(), target.size() - 1);
  if (length <= 0) return {};
  std::string_view resolved(target.data(), static_cast<std::size_t>(length));
  auto slash = resolved.rfind('/');
  return std::string(slash == std::string_view::npos ? resolved : resolved.substr(slash + 1));
}

struct FreeDeleter {
  void operator()(void* pointer) const { std::free(pointer); }
};

// Writes one 4 KiB block with O_DIRECT, reads it back and compares; returns the failing step
// with its errno text, or an empty string on success. The file is always removed.
std::string check_o_direct(const std::string& directory) {
  constexpr std::size_t block_bytes = 4096;
  std::random_device seed;
  std::string name = fmt::format("{}/.strata-odirect-{}-{:08x}", directory, ::getpid(), seed());
  int fd =
      ::open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int error = errno;
    if (error == EINVAL) {
      return "open with O_DIRECT: Invalid argument (this file system does not support O_DIRECT)";
    }
    return fmt::format("open with O_DIRECT: {}", errno_text(error));
  }
  std::string failure;
  void* raw = nullptr;
  if (::posix_memalign(&raw, block_bytes, 2 * block_bytes) != 0) {
    failure = "posix_memalign: out of memory";
  }
  std::unique_ptr<void, FreeDeleter> buffer(raw);
  if (failure.empty()) {
    auto* bytes = static_cast<unsigned char*>(buffer.get());
    for (std::size_t index = 0; index < block_bytes; ++index) {
      bytes[index] = static_cast<unsigned char>(index * 7 + 1);
    }
    ssize_t written = ::pwrite(fd, bytes, block_bytes, 0);
    if (written != static_cast<ssize_t>(block_bytes)) {
      failure = written < 0 ? fmt::format("aligned O_DIRECT write: {}", errno_text(errno))
                            : fmt::format("aligned O_DIRECT write: short ({} bytes)", written);
    } else {
      unsigned char* back = bytes + block_bytes;
      ssize_t read = ::pread(fd, back, block_bytes, 0);
      if (read != static_cast<ssize_t>(block_bytes)) {
        failure = read < 0 ? fmt::format("aligned O_DIRECT read: {}", errno_text(errno))
                           : fmt::format("aligned O_DIRECT read: short ({} bytes)", read);
      } else if (std::memcmp(bytes, back, block_bytes) != 0) {
        failure = "aligned O_DIRECT read returned other bytes than were written";
      }
    }
  }
  ::close(fd);
  ::unlink(name.c_str());
  return failure;
}

}  // namespace

std::int64_t MemoryFacts::usable_bytes() const {
  if (cgroup_limit_bytes && *cgroup_limit_bytes < total_bytes) return *cgroup_limit_bytes;
  return total_bytes;
}

CpuFacts probe_cpu() {
  CpuFacts facts;
  facts.model = cpu_model();
  probe_simd(facts);
  probe_topology(facts);
  return facts;
}

MemoryFacts probe_memory() {
  MemoryFacts facts;
  struct sysinfo info {};
  if (::sysinfo(&info) == 0) {
    facts.total_bytes = static_cast<std::int64_t>(info.totalram) * info.mem_unit;
  }
  facts.available_bytes = meminfo_bytes("MemAvailable");
  if (facts.available_bytes < 0) {
    facts.available_bytes = static_cast<std::int64_t>(info.freeram) * info.mem_unit;
  }
  facts.cgroup_limit_bytes = cgroup_memory_limit();
  facts.pinned_limit = gpu::pinned_limit();
  return facts;
}

IoUringFacts probe_io_uring() {
  IoUringFacts facts;
  struct utsname name {};
  if (::uname(&name) == 0) facts.kernel_release = name.release;
  struct io_uring ring {};
  int result = io_uring_queue_init(8, &ring, 0);
  if (result < 0) {
    facts.error = errno_text(-result);
    return facts;
  }
  io_uring_queue_exit(&ring);
  facts.available = true;
  return facts;
}

PathFacts probe_path(const std::string& path) {
  PathFacts facts;
  facts.path = path;
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0) {
    facts.error = fmt::format("{}: {}", path, errno_text(errno));
    return facts;
  }
  if (!S_ISDIR(status.st_mode)) {
    facts.error = fmt::format("{}: not a directory", path);
    return facts;
  }
  facts.exists = true;
  facts.block_device = block_device_of(status.st_dev);
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) != 0) {
    facts.error = fmt::format("statfs {}: {}", path, errno_text(errno));
    return facts;
  }
  facts.fs_type = fs_type_name(static_cast<std::int64_t>(fs.f_type));
  facts.free_bytes = static_cast<std::int64_t>(fs.f_bavail) * static_cast<std::int64_t>(fs.f_bsize);
  facts.total_bytes =
      static_cast<std::int64_t>(fs.f_blocks) * static_cast<std::int64_t>(fs.f_bsize);
  facts.o_direct_error = check_o_direct(path);
  facts.o_direct_ok = facts.o_direct_error.empty();
  return facts;
}

std::optional<std::int64_t> free_bytes_at(const std::string& path) {
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) != 0) return std::nullopt;
  return static_cast<std::int64_t>(fs.f_bavail) * static_cast<std::int64_t>(fs.f_bsize);
}

}  // namespace strata::tools

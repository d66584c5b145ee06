// `strata report`: what this machine offers for offloaded training, as text or one JSON object.
#include <unistd.h>

#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "base/units.h"
#include "engine/config/config.h"
#include "gpu/device_query.h"
#include "tools/commands.h"
#include "tools/machine_probe.h"

namespace strata::tools {
namespace {

struct ReportOptions {
  std::string config_path;
  std::string path;
  bool json = false;
};

struct MachineReport {
  CpuFacts cpu;
  MemoryFacts memory;
  gpu::GpuInventory gpu;
  std::string attention;  // gpu::attention_backend()
  IoUringFacts io_uring;
  PathFacts path;
  std::string path_source;  // "--path", "nvme_path of <config>" or "working directory"
};

// --path wins; else the config's nvme_path (offload_param's, then offload_optimizer's); else the
// working directory.
std::string choose_path(const ReportOptions& options, std::string& source) {
  if (!options.path.empty()) {
    source = "--path";
    return options.path;
  }
  if (!options.config_path.empty()) {
    engine::LoadedConfig loaded = engine::load_config_file(options.config_path);
    for (const auto* offload :
         {&loaded.config.zero.offload_param, &loaded.config.zero.offload_optimizer}) {
      if (!offload->nvme_path.empty()) {
        source = fmt::format("nvme_path of {}", options.config_path);
        return offload->nvme_path;
      }
    }
  }
  source = "working directory";
  return std::filesystem::current_path().string();
}

nlohmann::ordered_json optional_bytes(const std::optional<std::int64_t>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json to_json(const MachineReport& report) {
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
  for (const auto& gpu : report.gpu.gpus) {
    gpus.push_back({{"index", gpu.index},
                    {"name", gpu.name},
                    {"memory_bytes", gpu.memory_bytes},
                    {"compute_capability", fmt::format("{}.{}", gpu.compute_capability_major,
                                                       gpu.compute_capability_minor)},
                    {"multiprocessor_count", gpu.multiprocessor_count},
                    {"pci_bus_id", gpu.pci_bus_id}});
  }
  const CpuFacts& cpu = report.cpu;
  const PathFacts& path = report.path;
  return {
      {"cpu",
       {{"model", cpu.model},
        {"simd_level", cpu.simd_level},
        {"flags",
         {{"avx512f", cpu.avx512f},
          {"avx512bw", cpu.avx512bw},
          {"avx512vl", cpu.avx512vl},
          {"avx2", cpu.avx2},
          {"fma", cpu.fma},
          {"f16c", cpu.f16c}}},
        {"packages", cpu.packages},
        {"physical_cores", cpu.physical_cores},
        {"logical_cpus", cpu.logical_cpus},
        {"numa_nodes", cpu.numa_nodes},
        {"hwloc_error", cpu.hwloc_error}}},
      {"memory",
       {{"total_bytes", report.memory.total_bytes},
        {"available_bytes", report.memory.available_bytes},
        {"cgroup_limit_bytes", optional_bytes(report.memory.cgroup_limit_bytes)},
        {"memlock_limit_bytes", optional_bytes(report.memory.pinned_limit.rlimit_bytes)},
        {"cap_ipc_lock", report.memory.pinned_limit.cap_ipc_lock},
        {"memlock_unlimited", !report.memory.pinned_limit.lockable_bytes().has_value()}}},
      {"gpu",
       {{"cuda_built", report.gpu.cuda_built},
        {"gpus", gpus},
        {"cuda_runtime_version", report.gpu.cuda_runtime_version},
        {"cuda_driver_version", report.gpu.cuda_driver_version},
        {"nccl_version", report.gpu.nccl_version},
        {"attention", report.attention},
        {"probe_kernel_ran", report.gpu.probe_kernel_ran},
        {"no_gpu_reason", report.gpu.no_gpu_reason}}},
      {"io_uring",
       {{"available", report.io_uring.available},
        {"error", report.io_uring.error},
        {"kernel_release", report.io_uring.kernel_release}}},
      {"path",
       {{"path", path.path},
        {"source", report.path_source},
        {"exists", path.exists},
        {"error", path.error},
        {"fs_type", path.fs_type},
        {"block_device", path.block_device},
        {"free_bytes", path.free_bytes},
        {"total_bytes", path.total_bytes},
        {"o_direct", path.o_direct_ok},
        {"o_direct_error", path.o_direct_error}}},
  };
}

std::string bytes_text(std::int64_t bytes) {
  return base::format_bytes(static_cast<double>(bytes));
}

void print_cpu(const CpuFacts& cpu) {
  std::string flags;
  for (auto [name, present] : {std::pair{"avx512f", cpu.avx512f},
                               {"avx512bw", cpu.avx512bw},
                               {"avx512vl", cpu.avx512vl},
                               {"avx2", cpu.avx2},
                               {"fma", cpu.fma},
                               {"f16c", cpu.f16c}}) {
    if (present) flags += fmt::format("{}{}", flags.empty() ? "" : " ", name);
  }
  fmt::print("{:<10}{}\n", "CPU", cpu.model);
  std::string adam = cpu.simd_level == "scalar" ? " (CPU Adam runs its scalar kernel: slow)" : "";
  fmt::print("{:<10}{} [{}]{}\n", "SIMD", cpu.simd_level, flags.empty() ? "none" : flags, adam);
  if (!cpu.hwloc_error.empty()) {
    fmt::print("{:<10}unknown: {}\n", "cores", cpu.hwloc_error);
    return;
  }
  fmt::print("{:<10}{} physical, {} logical, {} package{}, {} NUMA node{}\n", "cores",
             cpu.physical_cores, cpu.logical_cpus, cpu.packages, cpu.packages == 1 ? "" : "s",
             cpu.numa_nodes, cpu.numa_nodes == 1 ? "" : "s");
}

void print_memory(const MemoryFacts& memory) {
  std::string cgroup =
      memory.cgroup_limit_bytes
          ? fmt::format(", cgroup limit {}", bytes_text(*memory.cgroup_limit_bytes))
          : "";
  fmt::print("{:<10}{} total, {} available{}\n", "RAM", bytes_text(memory.total_bytes),
             bytes_text(memory.available_bytes), cgroup);
  const gpu::PinnedLimit& limit = memory.pinned_limit;
  if (limit.lockable_bytes()) {
    fmt::print(
        "{:<10}{}: pin_memory beyond this trains unpinned; raise it with `ulimit -l unlimited` or "
        "memlock in /etc/security/limits.conf, or run with CAP_IPC_LOCK\n",
        "memlock", limit.describe());
  } else {
    fmt::print("{:<10}{}\n", "memlock", limit.describe());
  }
}

void print_gpu(const gpu::GpuInventory& inventory) {
  if (inventory.gpus.empty()) {
    fmt::print("{:<10}no GPU: {} (strata runs on its host backend)\n", "GPU",
               inventory.no_gpu_reason);
  }
  for (const auto& gpu : inventory.gpus) {
    fmt::print("{:<10}{}: {}, {}, compute capability {}.{}, {} SMs, bus {}\n", "GPU", gpu.index,
               gpu.name, bytes_text(gpu.memory_bytes), gpu.compute_capability_major,
               gpu.compute_capability_minor, gpu.multiprocessor_count, gpu.pci_bus_id);
  }
  if (inventory.cuda_built) {
    auto shown = [](const std::string& text) { return text.empty() ? "unknown" : text; };
    fmt::print("{:<10}runtime {}, driver supports {}, NCCL {}{}\n", "CUDA",
               shown(inventory.cuda_runtime_version), shown(inventory.cuda_driver_version),
               shown(inventory.nccl_version),
               inventory.gpus.empty()       ? ""
               : inventory.probe_kernel_ran ? ", probe kernel ok"
                                            : ", probe kernel FAILED");
  }
}

void print_io_uring(const IoUringFacts& io_uring) {
  if (io_uring.available) {
    fmt::print("{:<10}ok (kernel {})\n", "io_uring", io_uring.kernel_release);
    return;
  }
  fmt::print(
      "{:<10}refused: {} (kernel {}); NVMe offload needs it: check "
      "/proc/sys/kernel/io_uring_disabled and the container's seccomp profile\n",
      "io_uring", io_uring.error, io_uring.kernel_release);
}

void print_path(const PathFacts& path, const std::string& source) {
  fmt::print("{:<10}{} ({})\n", "path", path.path, source);
  if (!path.error.empty()) {
    fmt::print("{:<10}cannot examine: {}; create the directory or fix nvme_path\n", "", path.error);
    return;
  }
  std::string device = path.block_device.empty() ? "" : fmt::format(" on {}", path.block_device);
  fmt::print("{:<10}{}{}, {} free of {}\n", "", path.fs_type, device, bytes_text(path.free_bytes),
             bytes_text(path.total_bytes));
  if (path.o_direct_ok) {
    fmt::print("{:<10}O_DIRECT ok (4 KiB aligned write and read-back)\n", "");
  } else {
    bool access = path.o_direct_error.find("Permission denied") != std::string::npos ||
                  path.o_direct_error.find("Read-only") != std::string::npos;
    fmt::print("{:<10}O_DIRECT FAILED: {}; {}\n", "", path.o_direct_error,
               access ? "make the directory writable by this user"
                      : "put nvme_path on a local ext4 or xfs file system");
  }
}

void run_report(const ReportOptions& options) {
  MachineReport report;
  std::string path = choose_path(options, report.path_source);
  report.cpu = probe_cpu();
  report.memory = probe_memory();
  report.gpu = gpu::query_gpus();
  report.attention = gpu::attention_backend();
  report.io_uring = probe_io_uring();
  report.path = probe_path(path);
  if (!report.path.exists && !options.path.empty()) {
    throw UserError(fmt::format("--path {}", report.path.error),
                    "pass an existing directory: the one nvme_path names, where swap files go", 2);
  }
  if (options.json) {
    fmt::print("{}\n", to_json(report).dump(2));
    return;
  }
  print_cpu(report.cpu);
  print_memory(report.memory);
  print_gpu(report.gpu);
  fmt::print("{:<10}{}{}\n", "attention",
             report.gpu.gpus.empty() ? "the host backend's; on a GPU, " : "", report.attention);
  print_io_uring(report.io_uring);
  print_path(report.path, report.path_source);
}

}  // namespace

void add_report_command(CLI::App& app, CommandContext& /*context*/) {
  auto* command = app.add_subcommand("report", "What this machine offers for offloaded training");
  auto options = std::make_shared<ReportOptions>();
  command
      ->add_option("--config", options->config_path,
                   "DeepSpeed or Accelerate config: its nvme_path is the default --path")
      ->check(CLI::ExistingFile);
  command->add_option("--path", options->path,
                      "Directory to examine for swap files (file system, free space, O_DIRECT); "
                      "default: the config's nvme_path, else the working directory");
  command->add_flag("--json", options->json, "Print one JSON object instead of text");
  command->callback([options] { run_report(*options); });
}

}  // namespace strata::tools

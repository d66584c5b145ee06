// `strata report`, run as a user runs it: the JSON carries every fact, the text names every line,
// and every mistake a user can make is refused with a fix.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>

#include "gpu/pinned_limit.h"
#include "tests/tools/memlock_run.h"
#include "tests/tools/run_strata.h"

namespace strata::tools::testing {
namespace {

nlohmann::json report_json(const std::vector<std::string>& extra) {
  std::vector<std::string> arguments = {"report", "--json"};
  arguments.insert(arguments.end(), extra.begin(), extra.end());
  RunResult result = run_strata(arguments);
  EXPECT_EQ(result.exit_status, 0) << result.err;
  return nlohmann::json::parse(result.out);
}

TEST(ReportCommand, JsonHasEveryFact) {
  TempDir swap;
  nlohmann::json report = report_json({"--path", swap.path().string()});

  const nlohmann::json& cpu = report.at("cpu");
  EXPECT_FALSE(cpu.at("model").get<std::string>().empty());
  std::set<std::string> levels = {"AVX-512", "AVX2", "scalar"};
  EXPECT_TRUE(levels.contains(cpu.at("simd_level").get<std::string>())) << cpu.dump();
  EXPECT_TRUE(cpu.at("flags").at("avx2").is_boolean());
  EXPECT_EQ(cpu.at("hwloc_error"), "");
  EXPECT_GE(cpu.at("physical_cores").get<int>(), 1);
  EXPECT_GE(cpu.at("logical_cpus").get<int>(), cpu.at("physical_cores").get<int>());
  EXPECT_GE(cpu.at("numa_nodes").get<int>(), 1);

  const nlohmann::json& memory = report.at("memory");
  EXPECT_GT(memory.at("total_bytes").get<std::int64_t>(), 0);
  EXPECT_GT(memory.at("available_bytes").get<std::int64_t>(), 0);
  EXPECT_TRUE(memory.at("memlock_unlimited").is_boolean());
  EXPECT_TRUE(memory.at("cap_ipc_lock").is_boolean());
  EXPECT_TRUE(memory.contains("memlock_limit_bytes"));
  EXPECT_TRUE(memory.contains("cgroup_limit_bytes"));

  const nlohmann::json& gpu = report.at("gpu");
  EXPECT_TRUE(gpu.at("gpus").is_array());
  if (gpu.at("gpus").empty()) {
    EXPECT_FALSE(gpu.at("no_gpu_reason").get<std::string>().empty());
  } else {
    EXPECT_GT(gpu.at("gpus")[0].at("memory_bytes").get<std::int64_t>(), 0);
    EXPECT_FALSE(gpu.at("gpus")[0].at("compute_capability").get<std::string>().empty());
  }
  for (const char* key : {"cuda_runtime_version", "cuda_driver_version", "nccl_version"}) {
    EXPECT_TRUE(gpu.at(key).is_string()) << key;
  }
  // Which attention a CUDA run takes: cuDNN's, with the library it loaded, or strata's and why.
  const std::string attention = gpu.at("attention").get<std::string>();
  EXPECT_TRUE(attention.starts_with("cuDNN's fused attention where it builds a plan") ||
              attention.starts_with("strata's"))
      << attention;

  const nlohmann::json& io_uring = report.at("io_uring");
  EXPECT_TRUE(io_uring.at("available").is_boolean());
  EXPECT_EQ(io_uring.at("available").get<bool>(), io_uring.at("error").get<std::string>().empty());
  EXPECT_FALSE(io_uring.at("kernel_release").get<std::string>().empty());

  const nlohmann::json& path = report.at("path");
  EXPECT_EQ(path.at("path"), swap.path().string());
  EXPECT_EQ(path.at("source"), "--path");
  EXPECT_TRUE(path.at("exists").get<bool>());
  EXPECT_FALSE(path.at("fs_type").get<std::string>().empty());
  EXPECT_GT(path.at("free_bytes").get<std::int64_t>(), 0);
  EXPECT_GE(path.at("total_bytes").get<std::int64_t>(), path.at("free_bytes").get<std::int64_t>());
  EXPECT_EQ(path.at("o_direct").get<bool>(), path.at("o_direct_error").get<std::string>().empty());
  // The O_DIRECT probe file is gone.
  EXPECT_TRUE(std::filesystem::is_empty(swap.path()));
}

// The memlock facts are gpu::pinned_limit(), the answer a run decides its pin_memory by: this
// process's, and a child's that dropped CAP_IPC_LOCK and lowered RLIMIT_MEMLOCK (root without the
// capability is limited like anyone).
TEST(ReportCommand, MemlockIsWhatARunMayLock) {
  const gpu::PinnedLimit limit = gpu::pinned_limit();
  const nlohmann::json memory = report_json({}).at("memory");
  EXPECT_EQ(memory.at("cap_ipc_lock").get<bool>(), limit.cap_ipc_lock) << memory.dump();
  EXPECT_EQ(memory.at("memlock_unlimited").get<bool>(), !limit.lockable_bytes()) << memory.dump();
  if (limit.rlimit_bytes)
    EXPECT_EQ(memory.at("memlock_limit_bytes").get<std::int64_t>(), *limit.rlimit_bytes);
  else
    EXPECT_TRUE(memory.at("memlock_limit_bytes").is_null()) << memory.dump();

  const std::int64_t small = 1 << 20;
  const RunResult json = run_strata_locking_at_most(small, {"report", "--json"});
  ASSERT_EQ(json.exit_status, 0) << json.err;
  const nlohmann::json limited = nlohmann::json::parse(json.out).at("memory");
  EXPECT_FALSE(limited.at("cap_ipc_lock").get<bool>()) << limited.dump();
  EXPECT_FALSE(limited.at("memlock_unlimited").get<bool>()) << limited.dump();
  EXPECT_EQ(limited.at("memlock_limit_bytes").get<std::int64_t>(), small) << limited.dump();
  const RunResult text = run_strata_locking_at_most(small, {"report"});
  ASSERT_EQ(text.exit_status, 0) << text.err;
  EXPECT_NE(text.out.find("memlock   1.00 MiB (RLIMIT_MEMLOCK, 1024 KiB as `ulimit -l` shows it; "
                          "no CAP_IPC_LOCK): pin_memory beyond this trains unpinned"),
            std::string::npos)
      << text.out;
}

TEST(ReportCommand, TextNamesEveryLine) {
  TempDir swap;
  RunResult result = run_strata({"report", "--path", swap.path().string()});
  ASSERT_EQ(result.exit_status, 0) << result.err;
  for (const char* line : {"CPU", "SIMD", "cores", "RAM", "memlock", "GPU", "attention", "io_uring",
                           "path", "O_DIRECT", swap.path().c_str()}) {
    EXPECT_NE(result.out.find(line), std::string::npos) << line << "\n" << result.out;
  }
}

TEST(ReportCommand, DefaultsToTheWorkingDirectory) {
  nlohmann::json report = report_json({});
  EXPECT_EQ(report.at("path").at("source"), "working directory");
  EXPECT_EQ(report.at("path").at("path"), std::filesystem::current_path().string());
}

TEST(ReportCommand, PathComesFromTheConfigsNvmePath) {
  TempDir swap;
  std::string config = R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3,
      "offload_param": {"device": "nvme", "nvme_path": ")" +
                       swap.path().string() + R"("},
      "offload_optimizer": {"device": "cpu"}}})";
  std::filesystem::path file = swap.write("ds.json", config);
  nlohmann::json report = report_json({"--config", file.string()});
  EXPECT_EQ(report.at("path").at("path"), swap.path().string());
  EXPECT_NE(report.at("path").at("source").get<std::string>().find("nvme_path"), std::string::npos);
}

TEST(ReportCommand, MissingNvmePathIsReportedNotFatal) {
  TempDir dir;
  std::string missing = (dir.path() / "not-there").string();
  std::string config =
      R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "offload_optimizer":
      {"device": "nvme", "nvme_path": ")" +
      missing + R"("}}})";
  std::filesystem::path file = dir.write("ds.json", config);
  RunResult result = run_strata({"report", "--config", file.string()});
  ASSERT_EQ(result.exit_status, 0) << result.err;
  EXPECT_NE(result.out.find("cannot examine"), std::string::npos) << result.out;
  nlohmann::json report = report_json({"--config", file.string()});
  EXPECT_FALSE(report.at("path").at("exists").get<bool>());
  EXPECT_FALSE(report.at("path").at("error").get<std::string>().empty());
}

// /proc takes no new files: the O_DIRECT probe fails, and the report says why and what to do.
TEST(ReportCommand, NamesAFileSystemWhereODirectFails) {
  nlohmann::json report = report_json({"--path", "/proc"});
  EXPECT_EQ(report.at("path").at("fs_type"), "proc");
  EXPECT_FALSE(report.at("path").at("o_direct").get<bool>());
  EXPECT_NE(report.at("path").at("o_direct_error").get<std::string>().find("open with O_DIRECT"),
            std::string::npos);
  RunResult text = run_strata({"report", "--path", "/proc"});
  ASSERT_EQ(text.exit_status, 0) << text.err;
  EXPECT_NE(text.out.find("O_DIRECT FAILED"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("ext4 or xfs"), std::string::npos) << text.out;
}

TEST(ReportCommand, RefusesAMissingPath) {
  TempDir dir;
  RunResult result = run_strata({"report", "--path", (dir.path() / "nope").string()});
  EXPECT_EQ(result.exit_status, 2);
  EXPECT_NE(result.err.find("--path"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("No such file or directory"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("fix:"), std::string::npos) << result.err;
  EXPECT_TRUE(result.out.empty());
}

TEST(ReportCommand, RefusesAPathThatIsAFile) {
  TempDir dir;
  std::filesystem::path file = dir.write("plain", "x");
  RunResult result = run_strata({"report", "--path", file.string()});
  EXPECT_EQ(result.exit_status, 2);
  EXPECT_NE(result.err.find("not a directory"), std::string::npos) << result.err;
}

TEST(ReportCommand, RefusesABadConfig) {
  TempDir dir;
  std::filesystem::path file = dir.write(
      "bad.json", R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 7}})");
  RunResult result = run_strata({"report", "--config", file.string()});
  EXPECT_EQ(result.exit_status, 2);
  EXPECT_NE(result.err.find("zero_optimization.stage"), std::string::npos) << result.err;
  RunResult missing = run_strata({"report", "--config", (dir.path() / "none.json").string()});
  EXPECT_EQ(missing.exit_status, 2);
}

}  // namespace
}  // namespace strata::tools::testing

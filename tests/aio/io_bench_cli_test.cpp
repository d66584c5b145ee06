// `strata io-bench` and `strata io-tune` as a user runs them: refusals with the reason, the
// JSON fields of each run, and the test file removed at the end unless --keep. The runs use small
// files so the suite stays fast.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "aio_test_support.h"

namespace strata::aio {
namespace {

struct Outcome {
  int status = -1;
  std::string output;  // stdout and stderr together, unless the command splits them
};

Outcome run(const std::string& arguments, bool stdout_only = false) {
  std::string command =
      std::string(STRATA_BINARY) + " " + arguments + (stdout_only ? " 2>/dev/null" : " 2>&1");
  Outcome outcome;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return outcome;
  std::array<char, 4096> chunk{};
  while (std::fgets(chunk.data(), static_cast<int>(chunk.size()), pipe) != nullptr) {
    outcome.output += chunk.data();
  }
  int status = ::pclose(pipe);
  outcome.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

TEST(IoBenchCli, RefusesAMissingPath) {
  Outcome outcome = run("io-bench --path /nonexistent/strata-h2");
  EXPECT_EQ(outcome.status, 2);
  EXPECT_NE(outcome.output.find("does not exist"), std::string::npos) << outcome.output;
}

TEST(IoBenchCli, RefusesAFileAsPath) {
  testing::TempDir dir;
  {
    std::FILE* file = std::fopen((dir / "plain").c_str(), "w");
    std::fclose(file);
  }
  Outcome outcome = run("io-bench --path " + (dir / "plain").string());
  EXPECT_EQ(outcome.status, 2);
  EXPECT_NE(outcome.output.find("is not a directory"), std::string::npos) << outcome.output;
}

TEST(IoBenchCli, RefusesAnUnwritablePath) {
  // /proc refuses file creation even to root, which a permission bit would not.
  Outcome outcome = run("io-tune --path /proc");
  EXPECT_EQ(outcome.status, 2);
  EXPECT_NE(outcome.output.find("is not writable"), std::string::npos) << outcome.output;
}

TEST(IoBenchCli, RefusesAPathWithoutTheFreeSpace) {
  testing::TempDir dir;
  Outcome outcome = run("io-bench --path " + dir.path().string() + " --size 1000T");
  EXPECT_EQ(outcome.status, 2);
  EXPECT_NE(outcome.output.find("lacks the free space"), std::string::npos) << outcome.output;
}

TEST(IoBenchCli, JsonHasTheDocumentedFieldsForEachRun) {
  testing::TempDir dir;
  Outcome outcome =
      run("io-bench --path " + dir.path().string() +
              " --size 8M --block-size 128K --queue-depth 4 --rw randread --loops 2 --json",
          /*stdout_only=*/true);
  ASSERT_EQ(outcome.status, 0) << outcome.output;
  std::istringstream lines(outcome.output);
  std::string line;
  int runs = 0;
  while (std::getline(lines, line)) {
    auto object = nlohmann::json::parse(line);
    for (const char* field : {"rw", "block_size", "queue_depth", "threads", "bytes", "seconds",
                              "gbps", "iops", "lat_p50_us", "lat_p99_us"}) {
      EXPECT_TRUE(object.contains(field)) << field << " missing in " << line;
    }
    EXPECT_EQ(object["rw"], "randread");
    EXPECT_EQ(object["bytes"], 8 << 20);
    EXPECT_GT(object["gbps"].get<double>(), 0.0);
    EXPECT_EQ(object["iops"].get<double>() > 0, true);
    ++runs;
  }
  EXPECT_EQ(runs, 2);
}

TEST(IoBenchCli, WriteWithVerifyThenVerifiedRead) {
  testing::TempDir dir;
  std::string base = "io-bench --path " + dir.path().string() + " --size 8M --verify on --json";
  Outcome write = run(base + " --rw write --keep", true);  // kept for the read to verify
  ASSERT_EQ(write.status, 0) << write.output;
  Outcome read = run(base + " --rw read", true);
  ASSERT_EQ(read.status, 0) << read.output;
  EXPECT_EQ(nlohmann::json::parse(read.output)["verify"], true);
}

// The names in `dir`, for a message.
std::string listing(const std::filesystem::path& dir) {
  std::string names;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    names += entry.path().filename().string() + " ";
  return names;
}

// io-bench writes its test file, runs, and removes it, saying so; --keep leaves it, saying so,
// and the next run reuses it instead of writing it again.
TEST(IoBenchCli, RemovesItsTestFileUnlessKept) {
  testing::TempDir dir;
  const std::filesystem::path file = dir / "strata-io-bench.dat";
  const std::string base = "io-bench --path " + dir.path().string() + " --size 8M";
  Outcome removed = run(base);
  ASSERT_EQ(removed.status, 0) << removed.output;
  EXPECT_NE(removed.output.find("wrote the 8.00 MiB test file " + file.string()), std::string::npos)
      << removed.output;
  EXPECT_NE(removed.output.find("removed the test file " + file.string() + " (8.00 MiB)"),
            std::string::npos)
      << removed.output;
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << listing(dir.path());

  Outcome kept = run(base + " --verify on --keep");
  ASSERT_EQ(kept.status, 0) << kept.output;
  EXPECT_NE(kept.output.find("kept the test file " + file.string() + " (8.00 MiB)"),
            std::string::npos)
      << kept.output;
  EXPECT_EQ(std::filesystem::file_size(file), 8u << 20);

  Outcome reused = run(base + " --verify on --keep");
  ASSERT_EQ(reused.status, 0) << reused.output;
  EXPECT_EQ(reused.output.find("wrote the"), std::string::npos) << reused.output;

  Outcome json = run(base + " --verify on --json", /*stdout_only=*/true);
  ASSERT_EQ(json.status, 0) << json.output;
  EXPECT_EQ(nlohmann::json::parse(json.output)["bytes"], 8 << 20);  // stdout holds JSON only
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << listing(dir.path());
}

TEST(IoTuneCli, PrintsAnAioBlockWithBothFiguresAndRemovesItsTestFile) {
  testing::TempDir dir;
  Outcome outcome = run("io-tune --path " + dir.path().string() + " --size 8M --json", true);
  ASSERT_EQ(outcome.status, 0) << outcome.output;
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << listing(dir.path());
  auto result = nlohmann::json::parse(outcome.output);
  for (const char* key :
       {"block_size", "queue_depth", "intra_op_parallelism", "single_submit", "overlap_events"}) {
    EXPECT_TRUE(result["aio"].contains(key)) << key;
  }
  EXPECT_TRUE(result["aio"]["single_submit"].is_boolean());  // not "true" as ds_nvme_tune writes
  EXPECT_GT(result["read_gbps"].get<double>(), 0.0);
  EXPECT_GT(result["write_gbps"].get<double>(), 0.0);
}

TEST(IoTuneCli, KeepLeavesTheTestFileAndSaysSo) {
  testing::TempDir dir;
  Outcome outcome = run("io-tune --path " + dir.path().string() + " --size 8M --keep");
  ASSERT_EQ(outcome.status, 0) << outcome.output;
  const std::filesystem::path file = dir / "strata-io-bench.dat";
  EXPECT_NE(outcome.output.find("kept the test file " + file.string() + " (8.00 MiB)"),
            std::string::npos)
      << outcome.output;
  EXPECT_EQ(std::filesystem::file_size(file), 8u << 20);
}

}  // namespace
}  // namespace strata::aio

// `strata io-bench` and `strata io-tune` as a user runs them: refusals with the reason, and the
// JSON fields the issue names. The runs use small files so the suite stays fast.
#include <sys/wait.h>

#include <array>
#include <cstdio>
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

TEST(IoBenchCli, JsonHasTheIssuesFieldsForEachRun) {
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
  Outcome write = run(base + " --rw write", true);
  ASSERT_EQ(write.status, 0) << write.output;
  Outcome read = run(base + " --rw read", true);
  ASSERT_EQ(read.status, 0) << read.output;
  EXPECT_EQ(nlohmann::json::parse(read.output)["verify"], true);
}

TEST(IoTuneCli, PrintsAnAioBlockWithBothFigures) {
  testing::TempDir dir;
  Outcome outcome = run("io-tune --path " + dir.path().string() + " --size 8M --json", true);
  ASSERT_EQ(outcome.status, 0) << outcome.output;
  auto result = nlohmann::json::parse(outcome.output);
  for (const char* key :
       {"block_size", "queue_depth", "intra_op_parallelism", "single_submit", "overlap_events"}) {
    EXPECT_TRUE(result["aio"].contains(key)) << key;
  }
  EXPECT_TRUE(result["aio"]["single_submit"].is_boolean());  // not "true" as ds_nvme_tune writes
  EXPECT_GT(result["read_gbps"].get<double>(), 0.0);
  EXPECT_GT(result["write_gbps"].get<double>(), 0.0);
}

}  // namespace
}  // namespace strata::aio

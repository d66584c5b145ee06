// `strata bench offload`: usage errors exit 2 with cause and fix; a tiny run prints its figures.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include <fmt/format.h>

namespace {

struct Result {
  int status = -1;
  std::string output;
};

Result run(const std::string& arguments) {
  const std::string command = fmt::format("{} bench offload {} 2>&1", STRATA_BINARY, arguments);
  Result result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> chunk{};
  std::size_t read = 0;
  while ((read = fread(chunk.data(), 1, chunk.size(), pipe)) > 0)
    result.output.append(chunk.data(), read);
  const int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

TEST(BenchOffloadCli, UsageErrorsExitTwoWithAFix) {
  for (const char* arguments :
       {"--params 1M --device nvme", "--params 1M --device tape", "--params zero --device cpu",
        "--params 1M --device cpu --optimizer sgd", "--params 1M --device cpu --sub-group-size 0",
        "--params 1M --device cpu --states fp8"}) {
    const Result result = run(arguments);
    EXPECT_EQ(result.status, 2) << arguments << "\n" << result.output;
    EXPECT_NE(result.output.find("fix:"), std::string::npos) << arguments << "\n" << result.output;
  }
}

// A missing --path is made, as train makes a missing nvme_path; one under a file cannot be.
TEST(BenchOffloadCli, APathThatCannotBeMadeIsRefused) {
  const auto file = std::filesystem::temp_directory_path() /
                    fmt::format("strata-bench-offload-file-{}", getpid());
  std::ofstream(file) << "x";
  const Result result =
      run(fmt::format("--params 64K --device nvme --path {}/swap --no-pin", file.string()));
  std::filesystem::remove(file);
  EXPECT_EQ(result.status, 2) << result.output;
  EXPECT_NE(result.output.find("is not a directory"), std::string::npos) << result.output;
}

TEST(BenchOffloadCli, ATinyNvmeRunReportsEveryFigure) {
  const auto directory =
      std::filesystem::temp_directory_path() / fmt::format("strata-bench-offload-{}", getpid());
  std::filesystem::create_directories(directory);
  const Result result = run(fmt::format(
      "--params 200K --device nvme --path {} --sub-group-size 64K --steps 1 --threads 1 --json",
      directory.string()));
  std::filesystem::remove_all(directory);
  ASSERT_EQ(result.status, 0) << result.output;
  const auto begin = result.output.find('{');
  ASSERT_NE(begin, std::string::npos) << result.output;
  const nlohmann::json out = nlohmann::json::parse(result.output.substr(begin));
  for (const char* key :
       {"seconds_per_step", "adam_alone_s", "io_alone_s", "bound_s", "ratio_to_bound"})
    EXPECT_GT(out.at(key).get<double>(), 0.0) << key;
  EXPECT_EQ(out.at("sub_groups").get<int>(), 4);
}

// --states both: the fp32 and the bf16 states in one run, the bf16 extents half the bytes (master
// and two moments of 2 bytes against 4, each region a whole number of 4 KiB blocks here).
TEST(BenchOffloadCli, Bf16StatesBesideFp32StatesInOneRun) {
  const auto directory = std::filesystem::temp_directory_path() /
                         fmt::format("strata-bench-offload-bf16-{}", getpid());
  std::filesystem::create_directories(directory);
  const Result result =
      run(fmt::format("--params 256K --device nvme --path {} --sub-group-size "
                      "64K --steps 1 --threads 1 --no-pin --states both --json",
                      directory.string()));
  std::filesystem::remove_all(directory);
  ASSERT_EQ(result.status, 0) << result.output;
  const nlohmann::json out = nlohmann::json::parse(result.output.substr(result.output.find('{')));
  ASSERT_TRUE(out.contains("fp32") && out.contains("bf16")) << result.output;
  EXPECT_EQ(out.at("bf16").at("state_bytes").get<std::int64_t>() * 2,
            out.at("fp32").at("state_bytes").get<std::int64_t>());
  EXPECT_GT(out.at("bf16").at("seconds_per_step").get<double>(), 0.0);
}

}  // namespace

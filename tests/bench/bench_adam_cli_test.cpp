// `strata bench adam` and `strata bench membw` through the real binary: the JSON carries the
// promised keys and sane numbers, and each mistake a user can make exits 2 naming the cause.

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace {

struct CommandResult {
  int status;
  std::string out;  // stdout and, with merge_stderr, stderr
};

CommandResult run_strata(const std::string& arguments, bool merge_stderr = false) {
  const std::string command =
      std::string(STRATA_BINARY) + " " + arguments + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr)
    out += buffer.data();
  const int status = pclose(pipe);
  return CommandResult{WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(BenchCli, AdamJsonHasTheFiguresAndTheBound) {
  const CommandResult result = run_strata("bench adam --params 300K --threads 2 --steps 2 --json");
  ASSERT_EQ(result.status, 0) << result.out;
  const nlohmann::json json = nlohmann::json::parse(result.out);
  EXPECT_EQ(json["params"], 300'000);
  EXPECT_EQ(json["threads"], 2);
  EXPECT_EQ(json["bytes_per_param"], 30);  // p,g,m,v read; p,m,v written; bf16 copy
  for (const char* key : {"seconds_per_step", "params_per_s", "gbps"}) {
    EXPECT_GT(json[key].get<double>(), 0.0) << key;
    EXPECT_GT(json["bound"][key].get<double>(), 0.0) << key;
    EXPECT_GT(json["plain"][key].get<double>(), 0.0) << key;
  }
  EXPECT_GT(json["ratio_to_bound"].get<double>(), 0.0);
}

TEST(BenchCli, AdamCountsBytesPerPattern) {
  const CommandResult lion = run_strata(
      "bench adam --params 70K --optimizer lion --grad bf16 --copy none "
      "--steps 1 --json");
  ASSERT_EQ(lion.status, 0) << lion.out;
  // Lion: read p (4), g (2), m (4); write p, m (8); no copy.
  EXPECT_EQ(nlohmann::json::parse(lion.out)["bytes_per_param"], 18);
  EXPECT_TRUE(nlohmann::json::parse(lion.out)["plain"].is_null());
  const CommandResult adagrad = run_strata(
      "bench adam --params 70K --optimizer adagrad --grad fp16 --copy fp16 "
      "--steps 1 --json");
  ASSERT_EQ(adagrad.status, 0) << adagrad.out;
  EXPECT_EQ(nlohmann::json::parse(adagrad.out)["bytes_per_param"], 4 + 2 + 4 + 8 + 2);
}

TEST(BenchCli, AdamTextShowsTheVerdict) {
  const CommandResult result =
      run_strata("bench adam --params 100K --threads 1 --steps 1 --optimizer adamw");
  ASSERT_EQ(result.status, 0) << result.out;
  EXPECT_NE(result.out.find("membw bound"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("plain loop"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("verdict:"), std::string::npos) << result.out;
}

TEST(BenchCli, MembwJsonHasGbps) {
  const CommandResult result = run_strata("bench membw --params 200K --threads 1 --steps 2 --json");
  ASSERT_EQ(result.status, 0) << result.out;
  const nlohmann::json json = nlohmann::json::parse(result.out);
  EXPECT_GT(json["gbps"].get<double>(), 0.0);
  EXPECT_EQ(json["params"], 200'000);
}

TEST(BenchCli, ForcedIsaIsUsedAndABadOneIsRefused) {
  const std::string binary = std::string("STRATA_CPU_ISA=scalar ") + STRATA_BINARY;
  FILE* pipe =
      popen((binary + " bench membw --params 20K --steps 1 --json 2>/dev/null").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr)
    out += buffer.data();
  ASSERT_EQ(pclose(pipe), 0);
  EXPECT_EQ(nlohmann::json::parse(out)["isa"], "scalar");

  pipe = popen((std::string("STRATA_CPU_ISA=avx9000 ") + STRATA_BINARY +
                " bench membw --params 20K --steps 1 2>&1")
                   .c_str(),
               "r");
  ASSERT_NE(pipe, nullptr);
  out.clear();
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr)
    out += buffer.data();
  const int status = pclose(pipe);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(out.find("STRATA_CPU_ISA"), std::string::npos) << out;
  EXPECT_NE(out.find("fix:"), std::string::npos) << out;
}

TEST(BenchCli, UserMistakesExitTwoWithCauseAndFix) {
  struct Case {
    const char* arguments;
    const char* cause;
  };
  for (const Case& c :
       {Case{"bench adam --params 0", "--params"}, Case{"bench adam --params lots", "--params"},
        Case{"bench adam --params 1T", "available"},
        Case{"bench adam --params 1K --grad fp8", "--grad"},
        Case{"bench adam --params 1K --copy fp32", "--copy"},
        Case{"bench adam --params 1K --optimizer sgd", "--optimizer"},
        Case{"bench adam --params 1K --steps 0", "--steps"},
        Case{"bench adam --params 1K --threads -2", "--threads"},
        Case{"bench membw --params 1K --numa-node 4096", "NUMA node 4096"}}) {
    const CommandResult result = run_strata(c.arguments, true);
    EXPECT_EQ(result.status, 2) << c.arguments << "\n" << result.out;
    EXPECT_NE(result.out.find(c.cause), std::string::npos) << c.arguments << "\n" << result.out;
    EXPECT_NE(result.out.find("fix:"), std::string::npos) << c.arguments << "\n" << result.out;
  }
}

TEST(BenchCli, BenchNeedsASubcommand) {
  const CommandResult result = run_strata("bench", true);
  EXPECT_EQ(result.status, 2) << result.out;
}

}  // namespace

// `strata bench decode --json`, run as a user runs it on the host device with a tiny GPT: one run
// per batch with positive prefill and decode figures beside bounds that are the bandwidths over
// the weights' bytes; a model, a placement or a type it cannot run refused with the fix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "tests/tools/run_strata.h"

namespace strata::tools::testing {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kTiny = {"bench", "decode", "--prompt",       "8", "--new-tokens",
                                        "3",     "--json", "--bound-params", "1M"};

TEST(BenchDecodeCommand, EachBatchIsTimedBesideTheBandwidthOverTheWeights) {
  std::vector<std::string> arguments = kTiny;
  arguments.insert(arguments.end(), {"--model", "2x2x64", "--batch", "1,2"});
  const RunResult result = run_strata(arguments);
  ASSERT_EQ(result.exit_status, 0) << result.err;
  const nlohmann::json out = nlohmann::json::parse(result.out);
  EXPECT_EQ(out["weight_bytes"].get<double>(), 4.0 * out["parameters"].get<double>());
  ASSERT_EQ(out["runs"].size(), 2u);
  const double per_sequence =
      out["memory_gbps"].get<double>() * 1e9 / out["weight_bytes"].get<double>();
  for (const nlohmann::json& run : out["runs"]) {
    EXPECT_GT(run["prefill_tokens_per_s"].get<double>(), 0);
    EXPECT_GT(run["decode_tokens_per_s"].get<double>(), 0);
    const double batch = run["batch"].get<double>();
    EXPECT_NEAR(run["bound_tokens_per_s"].get<double>(), per_sequence * batch,
                1e-6 * per_sequence * batch);
    EXPECT_GT(run["read_bound_tokens_per_s"].get<double>(), 0);
  }
  EXPECT_GT(out["read_gbps"].get<double>(), 0);
}

TEST(BenchDecodeCommand, WhatItCannotRunIsRefusedWithTheFix) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> refusals = {
      {{"--model", "3x4x66"}, "give 125m, 350m, 1b, 1p3b or LxHxC"},
      {{"--model", "2x2x64", "--offload", "disk"}, "give none (the device), cpu or nvme"},
      {{"--model", "2x2x64", "--optimizer", "gpu"}, "give none (the device), cpu or nvme"},
      {{"--model", "2x2x64", "--dtype", "int8"}, "float32"},
  };
  for (const auto& [extra, fix] : refusals) {
    std::vector<std::string> arguments = kTiny;
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    const RunResult result = run_strata(arguments);
    EXPECT_EQ(result.exit_status, 2) << extra[0];
    EXPECT_THAT(result.err, HasSubstr("fix: "));
    EXPECT_THAT(result.err, HasSubstr(fix));
    EXPECT_TRUE(result.out.empty()) << result.out;
  }
}

}  // namespace
}  // namespace strata::tools::testing

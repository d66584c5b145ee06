// `strata bench device-optimizer --json`, run as a user runs it: the optimizer kept on the device
// (here the host device, whose step is cpu_adam) beside a device-to-device copy, with the bytes it
// counts per parameter; a bad option is refused with the fix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "tests/tools/run_strata.h"

namespace strata::tools::testing {
namespace {

using ::testing::HasSubstr;

nlohmann::json bench(const std::vector<std::string>& extra) {
  std::vector<std::string> arguments = {"bench",  "device-optimizer", "--json", "--params",
                                        "100003", "--steps",          "2"};
  arguments.insert(arguments.end(), extra.begin(), extra.end());
  RunResult result = run_strata(arguments);
  EXPECT_EQ(result.exit_status, 0) << result.err;
  return nlohmann::json::parse(result.out);
}

TEST(BenchDeviceOptimizerCommand, StepBesideTheCopyWithItsBytesPerParameter) {
  for (const auto& [copy, bytes] : {std::pair{"bf16", 30}, std::pair{"none", 28}}) {
    nlohmann::json out = bench({"--copy", copy});
    EXPECT_EQ(out.at("params"), 100003);
    EXPECT_EQ(out.at("copy"), copy);
    EXPECT_EQ(out.at("bytes_per_param"), bytes);
    for (const char* key :
         {"step_seconds", "params_per_second", "step_gbps", "d2d_copy_gbps", "ratio"}) {
      EXPECT_GT(out.at(key).get<double>(), 0) << key << " in " << out.dump();
    }
    EXPECT_DOUBLE_EQ(out.at("ratio").get<double>(),
                     out.at("step_gbps").get<double>() / out.at("d2d_copy_gbps").get<double>());
    EXPECT_DOUBLE_EQ(out.at("target_ratio").get<double>(), 0.8);
  }
}

TEST(BenchDeviceOptimizerCommand, AnUnknownCopyIsRefusedWithTheFix) {
  RunResult result = run_strata({"bench", "device-optimizer", "--copy", "fp8"});
  EXPECT_EQ(result.exit_status, 2);
  EXPECT_THAT(result.err, HasSubstr("--copy fp8 is not none or bf16"));
  EXPECT_THAT(result.err, HasSubstr("--copy none"));
}

}  // namespace
}  // namespace strata::tools::testing

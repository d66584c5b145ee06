// `strata bench attention --json`, run as a user runs it on the host device with tiny shapes: one
// row per shape with its flops as FlashAttention's benchmarks count them and positive figures for
// the forward and for forward plus backward; a shape, a kv-head count, a device or a type it
// cannot run refused with the fix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "gpu/device_query.h"
#include "tests/tools/run_strata.h"

namespace strata::tools::testing {
namespace {

using ::testing::HasSubstr;

nlohmann::json bench_attention(const std::vector<std::string>& extra) {
  std::vector<std::string> arguments = {"bench", "attention", "--json", "--repeats", "1"};
  arguments.insert(arguments.end(), extra.begin(), extra.end());
  RunResult result = run_strata(arguments);
  EXPECT_EQ(result.exit_status, 0) << result.err;
  return nlohmann::json::parse(result.out);
}

void expect_refused(const std::vector<std::string>& extra, const std::string& cause,
                    const std::string& fix) {
  std::vector<std::string> arguments = {"bench", "attention", "--json", "--repeats", "1"};
  arguments.insert(arguments.end(), extra.begin(), extra.end());
  RunResult result = run_strata(arguments);
  EXPECT_EQ(result.exit_status, 2);
  EXPECT_THAT(result.err, HasSubstr(cause));
  EXPECT_THAT(result.err, HasSubstr("fix: " + fix));
  EXPECT_TRUE(result.out.empty()) << result.out;
}

TEST(BenchAttentionCommand, EachShapeTimedForwardAndForwardBackward) {
  for (const char* dtype : {"float32", "bfloat16", "float16"}) {
    nlohmann::json out = bench_attention(
        {"--dtype", dtype, "--shape", "1x2x64x16", "--shape", "2x4x33x8", "--kv-heads", "2"});
    EXPECT_EQ(out.at("backend"), "host");
    EXPECT_EQ(out.at("dtype"), dtype);
    EXPECT_EQ(out.at("causal"), true);
    // The GPU's target is not the host's.
    EXPECT_FALSE(out.contains("target_vs_peer")) << out.dump();
    const nlohmann::json& shapes = out.at("shapes");
    ASSERT_EQ(shapes.size(), 2u);
    EXPECT_EQ(shapes[0].at("shape"), "1x2x64x16");
    EXPECT_EQ(shapes[1].at("batch"), 2);
    EXPECT_EQ(shapes[1].at("heads"), 4);
    EXPECT_EQ(shapes[1].at("kv_heads"), 2);
    EXPECT_EQ(shapes[1].at("seq_len"), 33);
    EXPECT_EQ(shapes[1].at("head_dim"), 8);
    // Causal: 4 * B * H * T * T * D / 2; forward plus backward 3.5x that.
    const double forward = 4.0 * 1 * 2 * 64 * 64 * 16 / 2;
    EXPECT_DOUBLE_EQ(shapes[0].at("forward_flops").get<double>(), forward);
    EXPECT_DOUBLE_EQ(shapes[0].at("forward_backward_flops").get<double>(), 3.5 * forward);
    for (const nlohmann::json& row : shapes) {
      EXPECT_EQ(row.at("kernels"), "host") << row.dump();
      for (const char* key :
           {"forward_ms", "forward_backward_ms", "forward_tflops", "forward_backward_tflops"})
        EXPECT_GT(row.at(key).get<double>(), 0) << key << " in " << row.dump();
    }
  }
}

TEST(BenchAttentionCommand, DefaultsToBf16AndOneKvHeadPerQueryHead) {
  nlohmann::json out = bench_attention({"--shape", "1x3x40x16"});
  EXPECT_EQ(out.at("dtype"), "bfloat16");
  EXPECT_EQ(out.at("shapes").at(0).at("kv_heads"), 3);
}

TEST(BenchAttentionCommand, DefaultsToTheTwoBenchmarkShapes) {
  // The default shapes are a GPU's work: only the parse is run here, through a refusal that comes
  // after it (a kv-head count dividing neither), so nothing is measured.
  expect_refused({"--kv-heads", "5"},
                 "--kv-heads 5 does not divide the 16 query heads of --shape 8x16x1024x128",
                 "give --kv-heads a divisor of every shape's head count");
}

TEST(BenchAttentionCommand, AShapeNotBxHxTxDIsRefusedWithTheFix) {
  for (const char* shape : {"1x2x64", "1x2x64x16x3", "1x2xAx16", "0x2x64x16", "1x2x64x16x"}) {
    expect_refused({"--shape", shape}, std::string("--shape ") + shape + " is not BxHxTxD",
                   "give --shape as four positive whole numbers joined by x");
  }
}

TEST(BenchAttentionCommand, KvHeadsNotDividingTheHeadsIsRefusedWithTheFix) {
  expect_refused({"--shape", "1x6x64x16", "--kv-heads", "4"},
                 "--kv-heads 4 does not divide the 6 query heads of --shape 1x6x64x16",
                 "give --kv-heads a divisor");
}

TEST(BenchAttentionCommand, AHeadWiderThanTheOpsTakeIsRefusedWithTheFix) {
  expect_refused({"--shape", "1x2x64x512"},
                 "head dim 512 is wider than the 256 the attention ops take",
                 "give a head dim of 256 or less");
}

TEST(BenchAttentionCommand, AnUnknownDtypeOrDeviceIsRefusedWithTheFix) {
  expect_refused({"--dtype", "float8"}, "--dtype float8 is not float32, bfloat16 or float16",
                 "give --dtype bfloat16");
  expect_refused({"--device", "gpu"}, "--device gpu is not host or cuda", "give --device cuda");
  expect_refused({"--kernels", "flash"}, "--kernels flash is not auto or strata",
                 "give --kernels strata for strata's own attention kernels");
}

// Without the CUDA backend, or without a GPU it can run on, --device cuda is refused before
// anything is measured (never measured on the host device in its place).
TEST(BenchAttentionCommand, CudaWithoutAUsableGpuIsRefusedWithTheFix) {
  const gpu::GpuInventory inventory = gpu::query_gpus();
  if (!inventory.gpus.empty() && inventory.probe_kernel_ran)
    GTEST_SKIP() << "this machine has a usable GPU: " << inventory.gpus.front().name;
  const char* cause = !inventory.cuda_built    ? "built without the CUDA backend"
                      : inventory.gpus.empty() ? "found no GPU"
                                               : "did not run a test kernel";
  expect_refused({"--device", "cuda", "--shape", "1x2x64x16"}, cause, "");
  RunResult result =
      run_strata({"bench", "attention", "--device", "cuda", "--shape", "1x2x64x16", "--json"});
  EXPECT_THAT(result.err, HasSubstr("pass --device host"));
}

}  // namespace
}  // namespace strata::tools::testing

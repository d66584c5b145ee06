// `strata bench gemm --json`, run as a user runs it: one row per linear layer of the model (or the
// one product asked for), each with OpenBLAS's and strata's figures, and the square bound; the
// products in 16 bits through the device's ops; a device or type it cannot run refused with the
// fix.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "gpu/device_query.h"
#include "tests/tools/run_strata.h"

namespace strata::tools::testing {
namespace {

using ::testing::HasSubstr;

nlohmann::json bench_gemm(const std::vector<std::string>& extra) {
  std::vector<std::string> arguments = {"bench", "gemm",     "--json", "--repeats",
                                        "1",     "--square", "64"};
  arguments.insert(arguments.end(), extra.begin(), extra.end());
  RunResult result = run_strata(arguments);
  EXPECT_EQ(result.exit_status, 0) << result.err;
  return nlohmann::json::parse(result.out);
}

void expect_positive_figures(const nlohmann::json& row) {
  for (const char* key : {"sgemm_forward_gflops", "sgemm_backward_gflops", "op_forward_gflops",
                          "op_backward_gflops"}) {
    EXPECT_GT(row.at(key).get<double>(), 0) << key << " in " << row.dump();
  }
}

// A GPT of 4 blocks, d_model 128, vocab 256, micro-batch 16 x seq_len 64.
const char* kConfig = R"({
  "train_micro_batch_size_per_gpu": 16,
  "zero_optimization": {"stage": 0},
  "strata": {"model": {"n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 64, "vocab": 256}}
})";

TEST(BenchGemmCommand, ModelShapesOneRowPerLinearLayer) {
  TempDir dir;
  std::filesystem::path config = dir.write("config.json", kConfig);
  nlohmann::json out = bench_gemm({"--threads", "2", "--config", config.string()});
  EXPECT_EQ(out.at("threads"), 2);
  EXPECT_THAT(out.at("source").get<std::string>(),
              HasSubstr("GPT, 834.30K parameters (n_layer 4, n_head 4, d_model 128, seq_len 64, "
                        "vocab 256), micro-batch 16"));
  EXPECT_FALSE(out.at("blas").get<std::string>().empty());
  // The kernels the products ran on are the ones OpenBLAS reports it is configured with.
  EXPECT_THAT(out.at("blas").get<std::string>(),
              HasSubstr(out.at("blas_kernels").get<std::string>()));
  const nlohmann::json& shapes = out.at("shapes");
  ASSERT_EQ(shapes.size(), 5u);
  // 16 x 64 = 1024 rows; qkv, projection, MLP up and down once per block, the head once.
  std::vector<std::string> names = {"qkv", "attn_proj", "mlp_fc", "mlp_proj", "lm_head"};
  std::vector<std::int64_t> n = {384, 128, 512, 128, 256};
  std::vector<std::int64_t> k = {128, 128, 128, 512, 128};
  double flops = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const nlohmann::json& row = shapes[i];
    EXPECT_EQ(row.at("name"), names[i]);
    EXPECT_EQ(row.at("m"), 1024);
    EXPECT_EQ(row.at("n"), n[i]);
    EXPECT_EQ(row.at("k"), k[i]);
    EXPECT_EQ(row.at("count"), i == 4 ? 1 : 4);
    expect_positive_figures(row);
    flops += 6.0 * 1024 * static_cast<double>(n[i] * k[i]) * (i == 4 ? 1 : 4);
  }
  EXPECT_DOUBLE_EQ(out.at("linear_flops_per_micro_batch").get<double>(), flops);
  EXPECT_GT(out.at("sgemm_gflops").get<double>(), 0);
  EXPECT_GT(out.at("op_gflops").get<double>(), 0);
  EXPECT_GT(out.at("op_vs_sgemm").get<double>(), 0);
  EXPECT_EQ(out.at("square"), 64);
  EXPECT_GT(out.at("square_sgemm_gflops").get<double>(), 0);
  // Unless asked otherwise, the host device's fp32 ops.
  EXPECT_EQ(out.at("backend"), "host");
  EXPECT_EQ(out.at("dtype"), "float32");
  // The engine runs the MLP's up-projection with its GELU as one op: that row times it too.
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_EQ(shapes[i].contains("op_gelu_forward_gflops"), names[i] == "mlp_fc") << names[i];
    EXPECT_EQ(shapes[i].at("large"), false) << names[i];
  }
  EXPECT_GT(shapes[2].at("op_gelu_forward_gflops").get<double>(), 0);
}

TEST(BenchGemmCommand, SixteenBitProductsOnTheHostDeviceBesideFp32Sgemm) {
  TempDir dir;
  std::filesystem::path config = dir.write("config.json", kConfig);
  for (const char* dtype : {"bfloat16", "float16"}) {
    nlohmann::json out = bench_gemm(
        {"--threads", "2", "--config", config.string(), "--device", "host", "--dtype", dtype});
    EXPECT_EQ(out.at("backend"), "host");
    EXPECT_EQ(out.at("dtype"), dtype);
    EXPECT_FALSE(out.at("device").get<std::string>().empty());
    const nlohmann::json& shapes = out.at("shapes");
    ASSERT_EQ(shapes.size(), 5u);
    for (const nlohmann::json& row : shapes)
      expect_positive_figures(row);
    EXPECT_GT(shapes[2].at("op_gelu_forward_gflops").get<double>(), 0);
    EXPECT_GT(out.at("op_vs_sgemm").get<double>(), 0);
    // The GPU's targets are not the host's.
    EXPECT_FALSE(out.contains("target_vs_peer")) << out.dump();
  }
}

TEST(BenchGemmCommand, AnUnknownDtypeIsRefusedWithTheFix) {
  RunResult result = run_strata({"bench", "gemm", "--dtype", "float8", "--json"});
  EXPECT_EQ(result.exit_status, 2);
  EXPECT_THAT(result.err, HasSubstr("--dtype float8 is not float32, bfloat16 or float16"));
  EXPECT_THAT(result.err, HasSubstr("fix: give --dtype bfloat16"));
  EXPECT_TRUE(result.out.empty()) << result.out;
}

TEST(BenchGemmCommand, AnUnknownDeviceIsRefusedWithTheFix) {
  RunResult result = run_strata({"bench", "gemm", "--device", "gpu", "--json"});
  EXPECT_EQ(result.exit_status, 2);
  EXPECT_THAT(result.err, HasSubstr("--device gpu is not host or cuda"));
  EXPECT_THAT(result.err, HasSubstr("fix: give --device cuda"));
  EXPECT_TRUE(result.out.empty()) << result.out;
}

// Without the CUDA backend, or without a GPU it can run on, --device cuda is refused before
// anything is measured (never measured on the host device in its place).
TEST(BenchGemmCommand, CudaWithoutAUsableGpuIsRefusedWithTheFix) {
  const gpu::GpuInventory inventory = gpu::query_gpus();
  if (!inventory.gpus.empty() && inventory.probe_kernel_ran)
    GTEST_SKIP() << "this machine has a usable GPU: " << inventory.gpus.front().name;
  RunResult result = run_strata(
      {"bench", "gemm", "--device", "cuda", "--dtype", "bfloat16", "--json", "--repeats", "1"});
  EXPECT_EQ(result.exit_status, 2);
  EXPECT_THAT(result.err, HasSubstr("--device cuda"));
  const char* cause = !inventory.cuda_built    ? "built without the CUDA backend"
                      : inventory.gpus.empty() ? "found no GPU"
                                               : "did not run a test kernel";
  EXPECT_THAT(result.err, HasSubstr(cause));
  EXPECT_THAT(result.err, HasSubstr("--device host"));
  EXPECT_TRUE(result.out.empty()) << result.out;
}

TEST(BenchGemmCommand, OneProductFromMNK) {
  nlohmann::json out = bench_gemm({"--m", "67", "--n", "33", "--k", "45", "--threads", "1"});
  EXPECT_EQ(out.at("threads"), 1);
  const nlohmann::json& shapes = out.at("shapes");
  ASSERT_EQ(shapes.size(), 1u);
  EXPECT_EQ(shapes[0].at("m"), 67);
  EXPECT_EQ(shapes[0].at("n"), 33);
  EXPECT_EQ(shapes[0].at("k"), 45);
  expect_positive_figures(shapes[0]);
  EXPECT_DOUBLE_EQ(out.at("linear_flops_per_micro_batch").get<double>(), 6.0 * 67 * 33 * 45);
}

TEST(BenchGemmCommand, PartOfAShapeIsRefused) {
  RunResult result = run_strata({"bench", "gemm", "--m", "64", "--json"});
  EXPECT_EQ(result.exit_status, 2);
  EXPECT_THAT(result.err, HasSubstr("--m, --n and --k describe one product and go together"));
  EXPECT_THAT(result.err, HasSubstr("fix: pass all three"));
  EXPECT_TRUE(result.out.empty()) << result.out;
}

TEST(BenchGemmCommand, DefaultsToTheBuiltInDemosShapes) {
  nlohmann::json out = bench_gemm({});
  EXPECT_THAT(out.at("source").get<std::string>(), HasSubstr("the built-in demo config: GPT"));
  EXPECT_EQ(out.at("shapes").size(), 5u);
}

}  // namespace
}  // namespace strata::tools::testing

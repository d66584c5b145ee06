// `strata bench gemm --json`, run as a user runs it: one row per linear layer of the model (or the
// one product asked for), each with OpenBLAS's and strata's figures, and the square bound.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

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

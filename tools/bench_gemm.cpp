// `strata bench gemm`: the matrix products of a GPT step, as strata's host matmul op runs them
// (fixed tiles on oneTBB over single-threaded OpenBLAS, for bits independent of the thread count)
// beside OpenBLAS's own multi-threaded sgemm on the same shapes, and sgemm on a large square
// product as the machine's BLAS ceiling. `strata train` reports the model's achieved GFLOP/s; this
// says how much of that the products alone could reach.

#include <cblas.h>
#include <fmt/format.h>
#include <tbb/global_control.h>
#include <tbb/info.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "base/error.h"
#include "engine/config/config.h"
#include "gpu/host/kernels/matmul.h"
#include "models/model_plan.h"
#include "tools/bench.h"
#include "tools/demo_config.h"

namespace strata::tools {
namespace {

struct GemmOptions {
  std::string config_path;  // "" = the built-in demo config
  std::int64_t m = 0;       // m, n, k all set: measure that one linear layer instead of a model's
  std::int64_t n = 0;
  std::int64_t k = 0;
  int threads = 0;  // 0 = every core
  int repeats = 20;
  std::int64_t square = 1024;
  bool json = false;
};

// One linear layer: out[rows, out] = inp[rows, in] @ weight[out, in]^T (+ bias), run `count`
// times per micro-batch (once per block, or once for the head).
struct Layer {
  std::string name;
  std::int64_t rows = 0;
  std::int64_t in = 0;
  std::int64_t out = 0;
  std::int64_t count = 1;
  bool bias = true;
  double forward_flops() const { return 2.0 * static_cast<double>(rows * in * out); }
  double backward_flops() const { return 2 * forward_flops(); }  // dinp and dweight
};

struct LayerFigures {
  double sgemm_forward_s = 0;
  double sgemm_backward_s = 0;
  double op_forward_s = 0;
  double op_backward_s = 0;
};

// The model's linear layers: the GPT's, or the Llama family's (q/k/v/o, gate/up/down, the head).
std::vector<Layer> model_layers(const models::ModelPlan& plan) {
  if (plan.gpt) {
    const models::GptShape& s = *plan.gpt;
    const std::int64_t rows = s.rows(), c = s.d_model;
    return {{"qkv", rows, c, 3 * c, s.n_layer, true},
            {"attn_proj", rows, c, c, s.n_layer, true},
            {"mlp_fc", rows, c, 4 * c, s.n_layer, true},
            {"mlp_proj", rows, 4 * c, c, s.n_layer, true},
            {"lm_head", rows, c, s.vocab, 1, false}};
  }
  const models::LlamaShape& s = *plan.llama;
  const std::int64_t rows = s.rows(), c = s.d_model;
  const std::int64_t q = s.n_head * s.head_dim(), kv = s.n_kv_head * s.head_dim();
  return {{"q_proj", rows, c, q, s.n_layer, s.qkv_bias},
          {"k_proj", rows, c, kv, s.n_layer, s.qkv_bias},
          {"v_proj", rows, c, kv, s.n_layer, s.qkv_bias},
          {"o_proj", rows, q, c, s.n_layer, false},
          {"gate_proj", rows, c, s.d_ff, s.n_layer, false},
          {"up_proj", rows, c, s.d_ff, s.n_layer, false},
          {"down_proj", rows, s.d_ff, c, s.n_layer, false},
          {"lm_head", rows, c, s.vocab, 1, false}};
}

models::ModelPlan plan_of(const GemmOptions& options) {
  engine::LoadedConfig loaded =
      options.config_path.empty()
          ? engine::parse_config_text(demo_config_json(), "the built-in demo config", 1)
          : engine::load_config_file(options.config_path, 1);
  return models::plan_model(loaded.config.strata.model,
                            loaded.config.batch.train_micro_batch_size_per_gpu);
}

// Median seconds of one call over `repeats` calls, after one warm-up call.
double median_seconds(const std::function<void()>& call, int repeats) {
  call();
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    call();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

std::vector<float> random_floats(std::int64_t count, std::uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(count));
  for (float& value : values)
    value = uniform(generator);
  return values;
}

// Row-major C[m, n] = op(A) @ op(B) with OpenBLAS choosing its own split over `threads`.
void sgemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
           const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
           std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a, static_cast<blasint>(lda),
              b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

LayerFigures measure_layer(const Layer& layer, int threads, int repeats) {
  const std::int64_t rows = layer.rows, in = layer.in, out = layer.out;
  std::vector<float> inp = random_floats(rows * in, 1);
  std::vector<float> weight = random_floats(out * in, 2);
  std::vector<float> bias = random_floats(out, 3);
  std::vector<float> dout = random_floats(rows * out, 4);
  std::vector<float> result(static_cast<std::size_t>(rows * out));
  std::vector<float> dinp(static_cast<std::size_t>(rows * in));
  std::vector<float> dweight(static_cast<std::size_t>(out * in));
  std::vector<float> dbias(static_cast<std::size_t>(out));
  float* b = layer.bias ? bias.data() : nullptr;
  float* db = layer.bias ? dbias.data() : nullptr;
  LayerFigures figures;
  // OpenBLAS's own threading first: the op below pins OpenBLAS back to one thread on every call.
  openblas_set_num_threads(threads);
  figures.sgemm_forward_s = median_seconds(
      [&] {
        sgemm(false, true, rows, out, in, inp.data(), in, weight.data(), in, 0.0f, result.data(),
              out);
      },
      repeats);
  figures.sgemm_backward_s = median_seconds(
      [&] {
        sgemm(false, false, rows, in, out, dout.data(), out, weight.data(), in, 1.0f, dinp.data(),
              in);
        sgemm(true, false, out, in, rows, dout.data(), out, inp.data(), in, 1.0f, dweight.data(),
              in);
      },
      repeats);
  figures.op_forward_s = median_seconds(
      [&] {
        gpu::host::kernels::matmul_forward(result.data(), inp.data(), weight.data(), b, rows, in,
                                           out);
      },
      repeats);
  figures.op_backward_s = median_seconds(
      [&] {
        gpu::host::kernels::matmul_backward(dinp.data(), dweight.data(), db, dout.data(),
                                            inp.data(), weight.data(), rows, in, out);
      },
      repeats);
  return figures;
}

double square_sgemm_seconds(std::int64_t size, int threads, int repeats) {
  std::vector<float> a = random_floats(size * size, 5);
  std::vector<float> b = random_floats(size * size, 6);
  std::vector<float> c(static_cast<std::size_t>(size * size));
  openblas_set_num_threads(threads);
  return median_seconds(
      [&] {
        sgemm(false, false, size, size, size, a.data(), size, b.data(), size, 0, c.data(), size);
      },
      std::max(3, repeats / 4));
}

double gflops(double flops, double seconds) {
  return seconds > 0 ? flops / seconds / 1e9 : 0.0;
}

void run_bench_gemm(const GemmOptions& options) {
  bool one_shape = options.m > 0 || options.n > 0 || options.k > 0;
  if (one_shape && (options.m <= 0 || options.n <= 0 || options.k <= 0)) {
    throw UserError("--m, --n and --k describe one product and go together",
                    "pass all three (rows, output channels, input channels) or none of them", 2);
  }
  // Before any product, raw or not: the kernel family must not change between the two.
  const char* kernels = gpu::host::kernels::blas_kernels();
  int threads = options.threads > 0 ? options.threads : tbb::info::default_concurrency();
  tbb::global_control parallelism(tbb::global_control::max_allowed_parallelism,
                                  static_cast<std::size_t>(threads));
  std::vector<Layer> layers;
  std::string source = "--m/--n/--k";
  if (one_shape) {
    layers.push_back({"linear", options.m, options.k, options.n, 1, true});
  } else {
    const models::ModelPlan plan = plan_of(options);
    layers = model_layers(plan);
    source =
        fmt::format("{}: {}, micro-batch {}",
                    options.config_path.empty() ? "the built-in demo config" : options.config_path,
                    plan.summary(), plan.batch());
  }
  nlohmann::json rows = nlohmann::json::array();
  double step_flops = 0, sgemm_s = 0, op_s = 0;
  for (const Layer& layer : layers) {
    LayerFigures f = measure_layer(layer, threads, options.repeats);
    auto count = static_cast<double>(layer.count);
    step_flops += count * (layer.forward_flops() + layer.backward_flops());
    sgemm_s += count * (f.sgemm_forward_s + f.sgemm_backward_s);
    op_s += count * (f.op_forward_s + f.op_backward_s);
    rows.push_back({{"name", layer.name},
                    {"m", layer.rows},
                    {"n", layer.out},
                    {"k", layer.in},
                    {"count", layer.count},
                    {"sgemm_forward_gflops", gflops(layer.forward_flops(), f.sgemm_forward_s)},
                    {"sgemm_backward_gflops", gflops(layer.backward_flops(), f.sgemm_backward_s)},
                    {"op_forward_gflops", gflops(layer.forward_flops(), f.op_forward_s)},
                    {"op_backward_gflops", gflops(layer.backward_flops(), f.op_backward_s)}});
  }
  double square_s = square_sgemm_seconds(options.square, threads, options.repeats);
  double square_gflops = gflops(2.0 * std::pow(static_cast<double>(options.square), 3), square_s);
  nlohmann::json result = {
      {"source", source},
      {"threads", threads},
      {"blas", openblas_get_config()},
      {"blas_kernels", kernels},
      {"repeats", options.repeats},
      {"shapes", rows},
      {"linear_flops_per_micro_batch", step_flops},
      {"sgemm_gflops", gflops(step_flops, sgemm_s)},
      {"op_gflops", gflops(step_flops, op_s)},
      {"op_vs_sgemm", sgemm_s > 0 && op_s > 0 ? sgemm_s / op_s : 0.0},
      {"square", options.square},
      {"square_sgemm_gflops", square_gflops},
  };
  if (options.json) {
    fmt::print("{}\n", result.dump(2));
    return;
  }
  fmt::print("strata bench gemm: {}, {} thread(s), {}\n", source, threads, openblas_get_config());
  fmt::print("GFLOP/s (1e9 flop/s), median of {} calls; forward 2mnk, backward 4mnk flops\n",
             options.repeats);
  fmt::print("{:<10} {:>6} {:>6} {:>6} | {:>11} {:>11} | {:>11} {:>11}\n", "product", "m", "n", "k",
             "sgemm fwd", "op fwd", "sgemm bwd", "op bwd");
  for (const nlohmann::json& row : rows) {
    fmt::print("{:<10} {:>6} {:>6} {:>6} | {:>11.1f} {:>11.1f} | {:>11.1f} {:>11.1f}\n",
               row["name"].get<std::string>(), row["m"].get<std::int64_t>(),
               row["n"].get<std::int64_t>(), row["k"].get<std::int64_t>(),
               row["sgemm_forward_gflops"].get<double>(), row["op_forward_gflops"].get<double>(),
               row["sgemm_backward_gflops"].get<double>(), row["op_backward_gflops"].get<double>());
  }
  fmt::print(
      "products of one micro-batch (forward and backward, {:.3g} GFLOP): strata's op {:.1f} "
      "GFLOP/s, OpenBLAS sgemm {:.1f} GFLOP/s ({:.2f}x)\n",
      step_flops / 1e9, result["op_gflops"].get<double>(), result["sgemm_gflops"].get<double>(),
      result["op_vs_sgemm"].get<double>());
  fmt::print("bound: OpenBLAS sgemm {}^3, {:.1f} GFLOP/s\n", options.square, square_gflops);
}

}  // namespace

void add_bench_gemm_command(CLI::App& bench, CommandContext& /*context*/) {
  auto options = std::make_shared<GemmOptions>();
  CLI::App* command = bench.add_subcommand(
      "gemm", "Measure the model's matrix products: strata's host matmul op beside OpenBLAS sgemm");
  command
      ->add_option(
          "--config", options->config_path,
          "DeepSpeed or Accelerate config whose model to take the shapes from (default: the "
          "built-in demo)")
      ->check(CLI::ExistingFile);
  command->add_option("--m", options->m, "Rows of one product (with --n and --k)")
      ->check(CLI::PositiveNumber);
  command->add_option("--n", options->n, "Output channels of one product")
      ->check(CLI::PositiveNumber);
  command->add_option("--k", options->k, "Input channels (the summed dimension) of one product")
      ->check(CLI::PositiveNumber);
  command->add_option("--threads", options->threads, "Threads (default: every core)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--repeats", options->repeats, "Timed calls per figure (the median counts)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--square", options->square, "Size of the square sgemm bound")
      ->check(CLI::Range(std::int64_t{16}, std::int64_t{8192}))
      ->capture_default_str();
  command->add_flag("--json", options->json, "One JSON document on stdout");
  command->callback([options] { run_bench_gemm(*options); });
}

}  // namespace strata::tools

// `strata bench gemm`: the matrix products of a model's step through the device's own ops
// (gpu::Ops::matmul_forward, matmul_gelu_forward and matmul_backward, bench/bench_gemm_ops.h), in
// the compute type asked for. On the host device (the default) they stand beside OpenBLAS's own
// multi-threaded sgemm on the same shapes and sgemm on a large square product, the machine's BLAS
// ceiling (bench/bench_gemm_sgemm.h): the host op runs fixed tiles on oneTBB over single-threaded
// OpenBLAS, for bits independent of the thread count. On CUDA the peer is plain torch.matmul in
// the same compute type on the same shapes, run by scripts/torch_matmul_peer.py from this
// command's --json; this command states the targets it is held to. `strata train` reports the
// model's achieved rate; this says how much of that the products alone could reach.

#include <cblas.h>
#include <fmt/format.h>
#include <tbb/global_control.h>
#include <tbb/info.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "bench/bench.h"
#include "bench/bench_device.h"
#include "bench/bench_gemm_ops.h"
#include "bench/bench_gemm_sgemm.h"
#include "bench/bench_gemm_shapes.h"
#include "engine/config/config.h"
#include "gpu/host/kernels/matmul.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "models/model_plan.h"
#include "tools/demo_config.h"

namespace strata::tools {
namespace {

struct GemmOptions {
  std::string config_path;  // "" = the built-in demo config
  std::int64_t m = 0;       // m, n, k all set: measure that one linear layer instead of a model's
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::string device = "host";
  std::string dtype = "float32";
  int threads = 0;  // 0 = every core (host device only)
  int repeats = 20;
  std::int64_t square = 1024;
  bool json = false;
};

// What the GPU's products are held to: 0.9x plain torch.matmul on every shape, and 600 TFLOP/s on
// the large ones (GemmLayer::large); cuBLAS reaches 722-798 TFLOP/s in bf16 on an H100 at 8192
// rows and 4096 to 16384 columns.
constexpr double kTargetVsPeer = 0.9;
constexpr double kTargetLargeGflops = 600e3;

models::ModelPlan plan_of(const GemmOptions& options) {
  engine::LoadedConfig loaded =
      options.config_path.empty()
          ? engine::parse_config_text(demo_config_json(), "the built-in demo config", 1)
          : engine::load_config_file(options.config_path, 1);
  return models::plan_model(loaded.config.strata.model,
                            loaded.config.batch.train_micro_batch_size_per_gpu);
}

double gflops(double flops, double seconds) {
  return seconds > 0 ? flops / seconds / 1e9 : 0.0;
}

struct Workload {
  std::vector<GemmLayer> layers;
  std::string source;  // where the shapes come from, for people
};

Workload workload_of(const GemmOptions& options) {
  const bool one_shape = options.m > 0 || options.n > 0 || options.k > 0;
  if (one_shape && (options.m <= 0 || options.n <= 0 || options.k <= 0)) {
    throw UserError("--m, --n and --k describe one product and go together",
                    "pass all three (rows, output channels, input channels) or none of them", 2);
  }
  if (one_shape)
    return {{{"linear", options.m, options.k, options.n, 1, true, false}}, "--m/--n/--k"};
  const models::ModelPlan plan = plan_of(options);
  return {
      model_gemm_layers(plan),
      fmt::format("{}: {}, micro-batch {}",
                  options.config_path.empty() ? "the built-in demo config" : options.config_path,
                  plan.summary(), plan.batch())};
}

// One row of --json per layer: its shape, the op's rates and, on the host, sgemm's.
nlohmann::json layer_row(const GemmLayer& layer, const OpTimes& op, const SgemmTimes* sgemm) {
  nlohmann::json row = {{"name", layer.name},
                        {"m", layer.rows},
                        {"n", layer.out},
                        {"k", layer.in},
                        {"count", layer.count},
                        {"large", layer.large()},
                        {"op_forward_gflops", gflops(layer.forward_flops(), op.forward_s)},
                        {"op_backward_gflops", gflops(layer.backward_flops(), op.backward_s)}};
  if (layer.gelu) row["op_gelu_forward_gflops"] = gflops(layer.forward_flops(), op.gelu_forward_s);
  if (sgemm != nullptr) {
    row["sgemm_forward_gflops"] = gflops(layer.forward_flops(), sgemm->forward_s);
    row["sgemm_backward_gflops"] = gflops(layer.backward_flops(), sgemm->backward_s);
  }
  return row;
}

// Every layer through the device's ops (and, on the host device, OpenBLAS), with the totals of
// one micro-batch's products.
nlohmann::json measure(const GemmOptions& options, const Workload& workload, gpu::Device& device,
                       gpu::DataType type, int threads) {
  const bool host = device.kind() == gpu::DeviceKind::host;
  std::unique_ptr<gpu::Ops> ops = gpu::create_ops(device);
  DeviceGemmTimer timer(device, *ops, type, options.repeats);
  nlohmann::json rows = nlohmann::json::array();
  double step_flops = 0, sgemm_s = 0, op_s = 0;
  for (const GemmLayer& layer : workload.layers) {
    // OpenBLAS first: the host op pins OpenBLAS back to one thread whenever it runs.
    const SgemmTimes sgemm = host ? time_sgemm(layer, threads, options.repeats) : SgemmTimes{};
    const OpTimes op = timer.time(layer);
    const auto count = static_cast<double>(layer.count);
    step_flops += count * (layer.forward_flops() + layer.backward_flops());
    sgemm_s += count * (sgemm.forward_s + sgemm.backward_s);
    op_s += count * (op.forward_s + op.backward_s);
    rows.push_back(layer_row(layer, op, host ? &sgemm : nullptr));
  }
  nlohmann::json result = {{"source", workload.source},
                           {"device", device.name()},
                           {"backend", gpu::to_string(device.kind())},
                           {"dtype", gpu::to_string(type)},
                           {"repeats", options.repeats},
                           {"shapes", rows},
                           {"linear_flops_per_micro_batch", step_flops},
                           {"op_gflops", gflops(step_flops, op_s)}};
  if (!host) {
    result["target_vs_peer"] = kTargetVsPeer;
    result["target_large_gflops"] = kTargetLargeGflops;
    return result;
  }
  const double square_s = square_sgemm_seconds(options.square, threads, options.repeats);
  result["threads"] = threads;
  result["blas"] = openblas_get_config();
  result["sgemm_gflops"] = gflops(step_flops, sgemm_s);
  result["op_vs_sgemm"] = sgemm_s > 0 && op_s > 0 ? sgemm_s / op_s : 0.0;
  result["square"] = options.square;
  result["square_sgemm_gflops"] =
      gflops(2.0 * std::pow(static_cast<double>(options.square), 3), square_s);
  return result;
}

std::string gelu_cell(const nlohmann::json& row, double scale) {
  if (!row.contains("op_gelu_forward_gflops")) return "-";
  return fmt::format("{:.1f}", row["op_gelu_forward_gflops"].get<double>() / scale);
}

void print_host(const nlohmann::json& result) {
  fmt::print("strata bench gemm: {}, {} thread(s), {}\n", result["source"].get<std::string>(),
             result["threads"].get<int>(), result["blas"].get<std::string>());
  fmt::print(
      "{} products through the host device's ops; GFLOP/s (1e9 flop/s), median of {} calls; "
      "forward 2mnk, backward 4mnk flops\n",
      result["dtype"].get<std::string>(), result["repeats"].get<int>());
  fmt::print("{:<10} {:>6} {:>6} {:>6} | {:>11} {:>11} {:>11} | {:>11} {:>11}\n", "product", "m",
             "n", "k", "sgemm fwd", "op fwd", "op fwd+gelu", "sgemm bwd", "op bwd");
  for (const nlohmann::json& row : result["shapes"]) {
    fmt::print("{:<10} {:>6} {:>6} {:>6} | {:>11.1f} {:>11.1f} {:>11} | {:>11.1f} {:>11.1f}\n",
               row["name"].get<std::string>(), row["m"].get<std::int64_t>(),
               row["n"].get<std::int64_t>(), row["k"].get<std::int64_t>(),
               row["sgemm_forward_gflops"].get<double>(), row["op_forward_gflops"].get<double>(),
               gelu_cell(row, 1), row["sgemm_backward_gflops"].get<double>(),
               row["op_backward_gflops"].get<double>());
  }
  fmt::print(
      "products of one micro-batch (forward and backward, {:.3g} GFLOP): strata's op {:.1f} "
      "GFLOP/s, OpenBLAS sgemm {:.1f} GFLOP/s ({:.2f}x)\n",
      result["linear_flops_per_micro_batch"].get<double>() / 1e9, result["op_gflops"].get<double>(),
      result["sgemm_gflops"].get<double>(), result["op_vs_sgemm"].get<double>());
  fmt::print("bound: OpenBLAS sgemm {}^3, {:.1f} GFLOP/s\n", result["square"].get<std::int64_t>(),
             result["square_sgemm_gflops"].get<double>());
}

void print_cuda(const nlohmann::json& result) {
  fmt::print("strata bench gemm: {}\n", result["source"].get<std::string>());
  fmt::print(
      "{} products through the ops of {}; TFLOP/s (1e12 flop/s), median of {} calls, each "
      "between two events on the compute stream; forward 2mnk, backward 4mnk flops\n",
      result["dtype"].get<std::string>(), result["device"].get<std::string>(),
      result["repeats"].get<int>());
  fmt::print("{:<10} {:>6} {:>6} {:>6} | {:>9} {:>11} {:>9}\n", "product", "m", "n", "k", "op fwd",
             "op fwd+gelu", "op bwd");
  std::string short_of_target;  // "qkv bwd, lm_head fwd"
  for (const nlohmann::json& row : result["shapes"]) {
    const std::string name = row["name"].get<std::string>();
    const double forward = row["op_forward_gflops"].get<double>() / 1e3;
    const double backward = row["op_backward_gflops"].get<double>() / 1e3;
    fmt::print("{:<10} {:>6} {:>6} {:>6} | {:>9.1f} {:>11} {:>9.1f}{}\n", name,
               row["m"].get<std::int64_t>(), row["n"].get<std::int64_t>(),
               row["k"].get<std::int64_t>(), forward, gelu_cell(row, 1e3), backward,
               row["large"].get<bool>() ? "  (large)" : "");
    if (!row["large"].get<bool>()) continue;
    const double gelu_forward = row.value("op_gelu_forward_gflops", kTargetLargeGflops) / 1e3;
    for (const auto& [direction, tflops] :
         {std::pair{"fwd", forward}, std::pair{"fwd+gelu", gelu_forward},
          std::pair{"bwd", backward}}) {
      if (tflops * 1e3 >= kTargetLargeGflops) continue;
      short_of_target +=
          fmt::format("{}{} {}", short_of_target.empty() ? "" : ", ", name, direction);
    }
  }
  fmt::print(
      "products of one micro-batch (forward and backward, {:.3g} GFLOP): strata's op {:.1f} "
      "TFLOP/s\n",
      result["linear_flops_per_micro_batch"].get<double>() / 1e9,
      result["op_gflops"].get<double>() / 1e3);
  fmt::print("target: >= {:.0f} TFLOP/s on the large products: {}\n", kTargetLargeGflops / 1e3,
             short_of_target.empty() ? "met" : "below it: " + short_of_target);
  fmt::print(
      "target: >= {:.1f}x plain torch.matmul on every shape: scripts/torch_matmul_peer.py torch "
      "runs it on this command's --json\n",
      kTargetVsPeer);
}

void run_bench_gemm(const GemmOptions& options) {
  const gpu::DeviceKind kind = parse_bench_device(options.device);
  const gpu::DataType type = parse_bench_dtype(options.dtype);
  const Workload workload = workload_of(options);
  if (kind == gpu::DeviceKind::cuda) {
    std::unique_ptr<gpu::Device> device = open_bench_cuda_device();
    const nlohmann::json result = measure(options, workload, *device, type, 0);
    if (options.json) {
      fmt::print("{}\n", result.dump(2));
    } else {
      print_cuda(result);
    }
    return;
  }
  // Before any product, raw or not: the kernel family must not change between the two.
  const char* kernels = gpu::host::kernels::blas_kernels();
  const int threads = options.threads > 0 ? options.threads : tbb::info::default_concurrency();
  tbb::global_control parallelism(tbb::global_control::max_allowed_parallelism,
                                  static_cast<std::size_t>(threads));
  std::unique_ptr<gpu::Device> device = gpu::create_host_device({});
  nlohmann::json result = measure(options, workload, *device, type, threads);
  result["blas_kernels"] = kernels;
  if (options.json) {
    fmt::print("{}\n", result.dump(2));
  } else {
    print_host(result);
  }
}

}  // namespace

void add_bench_gemm_command(CLI::App& bench, CommandContext& /*context*/) {
  auto options = std::make_shared<GemmOptions>();
  CLI::App* command = bench.add_subcommand(
      "gemm",
      "Measure the model's matrix products through the device's matmul ops: on the host beside "
      "OpenBLAS sgemm, on CUDA for scripts/torch_matmul_peer.py");
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
  command->add_option("--device", options->device, "host or cuda")->capture_default_str();
  command
      ->add_option("--dtype", options->dtype,
                   "The products' compute type: float32, bfloat16 or float16")
      ->capture_default_str();
  command->add_option("--threads", options->threads, "Threads on the host (default: every core)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--repeats", options->repeats, "Timed calls per figure (the median counts)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--square", options->square, "Size of the host's square sgemm bound")
      ->check(CLI::Range(std::int64_t{16}, std::int64_t{8192}))
      ->capture_default_str();
  command->add_flag("--json", options->json, "One JSON document on stdout");
  command->callback([options] { run_bench_gemm(*options); });
}

}  // namespace strata::tools

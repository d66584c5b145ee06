// `strata bench decode`: generation with a KV cache on a GPT of a given size (fresh weights),
// through the engine as `strata generate` runs it: the prefill's tokens/s, and the decode steps'
// tokens/s at each batch beside their bound. A decode step reads every weight once, so at batch
// B its bound is B x the memory bandwidth over the weights' bytes: `strata bench membw`'s figure
// on the host, a device-to-device copy's on CUDA, both measured in the same run. On the host the
// rate of reading memory alone is measured too, which a step that only reads is held to.
//
//   strata bench decode [--device host|cuda] [--dtype float32] [--model 125m|350m|1b|1p3b|LxHxC]
//                       [--batch 1,8] [--prompt 128] [--new-tokens 32]
//                       [--offload none|cpu|nvme] [--optimizer none|cpu|nvme] [--nvme-path DIR]
//                       [--device-memory-budget BYTES] [--json]
//
// With the weights offloaded (stage 3, every weight gathered again for each step) the bound is
// their transfer: host-to-device copies for cpu, the swap disk's reads for nvme.

#include <fmt/format.h>

#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/units.h"
#include "bench/bench.h"
#include "bench/bench_copy.h"
#include "bench/bench_device.h"
#include "bench/bench_stream.h"
#include "engine/config/config.h"
#include "engine/engine.h"
#include "gpu/process_group.h"
#include "gpu/stream.h"
#include "models/model_plan.h"
#include "tools/built_engine.h"
#include "tools/io_bench_sweep.h"

namespace strata::tools {
namespace {

struct DecodeOptions {
  std::string device = "host";
  std::string dtype = "float32";
  std::string model = "125m";
  std::vector<int> batches = {1, 8};
  int prompt = 128;
  int new_tokens = 32;
  std::string offload = "none";    // where the weights live: none (the device), cpu or nvme
  std::string optimizer = "none";  // where a training run's optimizer states would live
  std::string nvme_path = ".";
  std::string device_memory_budget;   // "": the device's default (strata.device_memory_budget 0)
  std::string bound_params = "256M";  // membw's arrays; the read stream takes 4 bytes of each
  bool json = false;
};

// A GPT's layers, heads and width: GPT-2 small and medium, a 1.0B and a 1.3B
// (configs/gpt_1p3b_in_gpu.json) over GPT-2's vocabulary, or LxHxC.
struct ModelSize {
  std::int64_t layers = 0, heads = 0, width = 0;
};

ModelSize parse_model(const std::string& name) {
  if (name == "125m") return {12, 12, 768};
  if (name == "350m") return {24, 16, 1024};
  if (name == "1b") return {18, 16, 2048};
  if (name == "1p3b") return {24, 16, 2048};
  ModelSize size;
  if (std::sscanf(name.c_str(), "%ldx%ldx%ld", &size.layers, &size.heads, &size.width) == 3 &&
      size.layers > 0 && size.heads > 0 && size.width % size.heads == 0)
    return size;
  throw UserError(
      fmt::format("--model {} is not a model size", name),
      "give 125m, 350m, 1b, 1p3b or LxHxC (layers x heads x width, heads dividing width)", 2);
}

// Where the weights live: on the device (stage 0), or at stage 3 in CPU memory or on NVMe, all
// of them read again for every step (max_in_cpu 0), with the optimizer's states beside them. The
// engine holds a training run's optimizer states too: --optimizer cpu or nvme puts them there
// (stage 3) for a model whose 16 bytes a parameter do not fit beside its weights.
std::string zero_json(const DecodeOptions& options) {
  const auto placement = [](const std::string& option, const std::string& value) {
    if (value != "none" && value != "cpu" && value != "nvme") {
      throw UserError(fmt::format("{} {} is not a placement", option, value),
                      "give none (the device), cpu or nvme", 2);
    }
    return value;
  };
  const std::string params = placement("--offload", options.offload);
  const std::string states =
      params != "none" ? params : placement("--optimizer", options.optimizer);
  if (params == "none" && states == "none") return R"({"stage": 0})";
  return fmt::format(R"({{"stage": 3, "sub_group_size": 1e7,
      "offload_param": {{"device": "{0}", "nvme_path": "{2}", "max_in_cpu": 0}},
      "offload_optimizer": {{"device": "{1}", "nvme_path": "{2}"}}}})",
                     params, states, options.nvme_path);
}

std::string config_json(const DecodeOptions& options, ModelSize size, int batch) {
  const bool half = options.dtype != "float32";
  return fmt::format(R"({{"train_micro_batch_size_per_gpu": {}, "{}": {{"enabled": {}}},
    "zero_optimization": {},
    "strata": {{"model": {{"n_layer": {}, "n_head": {}, "d_model": {}, "seq_len": {},
                          "vocab": 50257}}, "seed": 1, "device_memory_budget": "{}"}}}})",
                     batch, options.dtype == "float16" ? "fp16" : "bf16", half ? "true" : "false",
                     zero_json(options), size.layers, size.heads, size.width,
                     options.prompt + options.new_tokens,
                     options.device_memory_budget.empty() ? "0" : options.device_memory_budget);
}

struct DecodeRun {
  int batch = 0;
  double prefill_tokens_per_s = 0;
  double decode_tokens_per_s = 0;
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One prefill of every sequence's prompt (after one untimed), then new_tokens decode steps of
// every sequence.
DecodeRun measure(engine::Engine& engine, const DecodeOptions& options, int batch) {
  const std::int64_t prompt = options.prompt;
  engine.reserve_cache(prompt + options.new_tokens);
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(batch * prompt));
  for (std::size_t i = 0; i < inputs.size(); ++i)
    inputs[i] = static_cast<std::int32_t>((i * 7919) % 50257);
  std::vector<std::int32_t> start(static_cast<std::size_t>(batch), 0);
  std::vector<std::int64_t> rows;
  for (int b = 0; b < batch; ++b)
    rows.push_back(b * prompt + prompt - 1);
  // A first prefill touches the activations' and the cache's fresh pages; the second is timed.
  static_cast<void>(engine.cached_logits(inputs, prompt, start, rows));
  const Clock::time_point prefill = Clock::now();
  static_cast<void>(engine.cached_logits(inputs, prompt, start, rows));
  DecodeRun run{batch, static_cast<double>(batch * prompt) / since(prefill), 0};
  for (int b = 0; b < batch; ++b)
    rows[static_cast<std::size_t>(b)] = b;
  inputs.resize(static_cast<std::size_t>(batch));
  const Clock::time_point decode = Clock::now();
  for (int step = 0; step < options.new_tokens; ++step) {
    start.assign(static_cast<std::size_t>(batch), static_cast<std::int32_t>(prompt + step));
    static_cast<void>(engine.cached_logits(inputs, 1, start, rows));
  }
  run.decode_tokens_per_s = static_cast<double>(batch * options.new_tokens) / since(decode);
  return run;
}

// How fast the host reads memory alone, in 1e9 bytes/s: the median of 5 sums of an array of
// 64-bit words (4 bytes for each of membw's parameters: 1 GiB for its 256M) (integer adds, which
// the compiler vectorises), split over the workers as the decode's products are. A decode step only
// reads its weights; membw's figure counts its writes.
double host_read_gbps(std::int64_t params) {
  const auto words = static_cast<std::size_t>(params / 2);
  std::vector<std::uint64_t> array(words, 1);
  std::vector<double> seconds;
  for (int round = 0; round < 5; ++round) {
    const Clock::time_point start = Clock::now();
    const std::uint64_t sum = tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, words, std::size_t{1} << 20), std::uint64_t{0},
        [&](const tbb::blocked_range<std::size_t>& range, std::uint64_t total) {
          for (std::size_t i = range.begin(); i < range.end(); ++i)
            total += array[i];
          return total;
        },
        std::plus<>());
    seconds.push_back(since(start));
    if (sum != words) throw std::logic_error("the read stream summed the wrong words");
  }
  std::ranges::sort(seconds);
  return static_cast<double>(words * sizeof(std::uint64_t)) / seconds[2] / 1e9;
}

// The device's memory bandwidth in 1e9 bytes/s: `strata bench membw`'s on the host (read and
// written); the best of 5 device-to-device copies of 1 GiB (twice its bytes over its time, as
// `strata bench h2d` times a copy) on CUDA.
double memory_gbps(gpu::Device& device, const std::string& params) {
  if (device.kind() != gpu::DeviceKind::cuda) {
    bench::StreamOptions stream;
    stream.params = params;  // 256M: as docs/benchmarks.md measures `strata bench membw`
    stream.copy = "none";
    return bench::measure_membw(stream).gbps;
  }
  constexpr std::int64_t bytes = std::int64_t{1} << 30;
  gpu::DeviceBuffer from = device.allocate(bytes, "bandwidth source");
  gpu::DeviceBuffer to = device.allocate(bytes, "bandwidth target");
  const bench::CopyTimes times =
      bench::copy_times(device, device.compute_stream(), to.data(), from.data(), bytes,
                        gpu::CopyKind::device_to_device, 5);
  return 2.0 * bytes / times.engine_seconds / 1e9;
}

// How fast the weights reach the device from where they live, in 1e9 bytes/s: the best of 5
// host-to-device copies of 1 GiB from page-locked memory (PCIe on CUDA, memcpy on the host), as
// `strata bench h2d` times them, for cpu; the swap
// disk's sequential reads through the aio engine (`strata io-bench`'s run, 2 GiB, 1 MiB blocks,
// queue depth 32) for nvme.
double transfer_gbps(const DecodeOptions& options, gpu::Device& device) {
  if (options.offload == "nvme") {
    io::RunConfig read;
    read.dir = options.nvme_path;
    read.size_bytes = std::int64_t{2} << 30;
    io::check_path(read.dir, read.size_bytes);
    io::prepare_file(read);
    const std::vector<io::RunResult> runs = io::run(read, 2);
    io::finish_test_file(read, /*keep=*/false);
    return std::max(runs[0].gbps, runs[1].gbps);
  }
  constexpr std::int64_t bytes = std::int64_t{1} << 30;
  gpu::PinnedBuffer from = device.allocate_pinned(bytes);
  gpu::DeviceBuffer to = device.allocate(bytes, "transfer target");
  const bench::CopyTimes times = bench::copy_times(
      device, device.h2d_stream(), to.data(), from.data(), bytes, gpu::CopyKind::host_to_device, 5);
  return static_cast<double>(bytes) / times.engine_seconds / 1e9;
}

// The bandwidths a decode step is held to, in 1e9 bytes/s: the device's memory bandwidth, on the
// host its read rate alone (0 on CUDA), and with the weights offloaded the rate they reach the
// device from CPU memory or NVMe (0 on the device), which then bounds each step.
struct Bandwidth {
  double memory = 0;
  double read = 0;
  double transfer = 0;
};

// The runs as one JSON document: what was measured, the bandwidths, and each batch's figures beside
// its bound (the memory's, or the transfer's when the weights are offloaded) and, on the host with
// the weights in memory, its read bound (null otherwise).
nlohmann::ordered_json runs_json(const DecodeOptions& options, const std::vector<DecodeRun>& runs,
                                 std::int64_t parameters, double weight_bytes, Bandwidth bandwidth,
                                 const std::string& on) {
  const double bound_gbps = bandwidth.transfer > 0 ? bandwidth.transfer : bandwidth.memory;
  const double bound_at_one = bound_gbps * 1e9 / weight_bytes;
  const double read_at_one = bandwidth.transfer > 0 ? 0.0 : bandwidth.read * 1e9 / weight_bytes;
  nlohmann::ordered_json out = {{"device", on},
                                {"dtype", options.dtype},
                                {"model", options.model},
                                {"parameters", parameters},
                                {"weight_bytes", weight_bytes},
                                {"offload", options.offload},
                                {"optimizer", options.optimizer},
                                {"prompt", options.prompt},
                                {"new_tokens", options.new_tokens},
                                {"memory_gbps", bandwidth.memory},
                                {"read_gbps", bandwidth.read},
                                {"transfer_gbps", bandwidth.transfer},
                                {"bound_gbps", bound_gbps},
                                {"runs", nlohmann::ordered_json::array()}};
  for (const DecodeRun& run : runs) {
    const double bound = bound_at_one * run.batch;
    out["runs"].push_back({{"batch", run.batch},
                           {"prefill_tokens_per_s", run.prefill_tokens_per_s},
                           {"decode_tokens_per_s", run.decode_tokens_per_s},
                           {"bound_tokens_per_s", bound},
                           {"fraction_of_bound", run.decode_tokens_per_s / bound},
                           {"read_bound_tokens_per_s",
                            read_at_one > 0 ? nlohmann::ordered_json(read_at_one * run.batch)
                                            : nlohmann::ordered_json()}});
  }
  return out;
}

void print_runs(const DecodeOptions& options, const std::vector<DecodeRun>& runs,
                std::int64_t parameters, double weight_bytes, Bandwidth bandwidth,
                const std::string& on) {
  const double gbps = bandwidth.transfer > 0 ? bandwidth.transfer : bandwidth.memory;
  const double bound_at_one = gbps * 1e9 / weight_bytes;
  // Reading memory is what bounds a step only while the weights are in it.
  const double read_at_one = bandwidth.transfer > 0 ? 0.0 : bandwidth.read * 1e9 / weight_bytes;
  if (options.json) {
    fmt::print("{}\n", runs_json(options, runs, parameters, weight_bytes, bandwidth, on).dump(2));
    return;
  }
  fmt::print("strata bench decode: GPT {} ({} parameters, {} of weights in {}) on {}\n",
             options.model, base::format_count(static_cast<double>(parameters)),
             base::format_bytes(weight_bytes), options.dtype, on);
  fmt::print("bound: {:.1f} GB/s {} / the weights = {:.1f} tokens/s a sequence\n", gbps,
             bandwidth.transfer > 0
                 ? fmt::format("from {} to the device (weights offloaded)", options.offload)
                 : std::string("of memory bandwidth"),
             bound_at_one);
  if (read_at_one > 0) {
    fmt::print("read bound: {:.1f} GB/s read alone / the weights = {:.1f} tokens/s a sequence\n",
               bandwidth.read, read_at_one);
  }
  fmt::print("{:>6} {:>14} {:>14} {:>14} {:>9} {:>13}\n", "batch", "prefill tok/s", "decode tok/s",
             "bound tok/s", "of bound", "of read bound");
  for (const DecodeRun& run : runs) {
    const std::string of_read =
        read_at_one > 0
            ? fmt::format("{:.2f}x", run.decode_tokens_per_s / (read_at_one * run.batch))
            : "-";
    fmt::print("{:>6} {:>14.1f} {:>14.1f} {:>14.1f} {:>8.2f}x {:>13}\n", run.batch,
               run.prefill_tokens_per_s, run.decode_tokens_per_s, bound_at_one * run.batch,
               run.decode_tokens_per_s / (bound_at_one * run.batch), of_read);
  }
}

void run_bench_decode(const DecodeOptions& options) {
  const ModelSize size = parse_model(options.model);
  static_cast<void>(parse_bench_dtype(options.dtype));
  static_cast<void>(zero_json(options));  // the placements, refused before anything is measured
  const gpu::DeviceKind kind = parse_bench_device(options.device);
  gpu::World world;
  // The bounds first, their arrays gone before any model is built.
  Bandwidth bandwidth;
  bandwidth.memory = memory_gbps(*open_bench_device(kind), options.bound_params);
  if (options.offload != "none") {
    bandwidth.transfer = transfer_gbps(options, *open_bench_device(kind));
  } else if (kind != gpu::DeviceKind::cuda) {
    bandwidth.read = host_read_gbps(
        bench::parse_params(options.bound_params, bench::make_pattern(bench::StreamOptions{})));
  }
  std::vector<DecodeRun> runs;
  std::int64_t parameters = 0;
  std::string on;
  for (int batch : options.batches) {
    const engine::Config config =
        engine::parse_config_text(config_json(options, size, batch), "bench decode").config;
    BuiltEngine built(
        world, open_bench_device(kind, config.strata.device_memory_budget), config,
        models::plan_model(config.strata.model, config.batch.train_micro_batch_size_per_gpu));
    parameters = built.engine.layout().parameter_count();
    on = built.device->name();
    runs.push_back(measure(built.engine, options, batch));
  }
  const double element = options.dtype == "float32" ? 4.0 : 2.0;
  print_runs(options, runs, parameters, static_cast<double>(parameters) * element, bandwidth, on);
}

}  // namespace

void add_bench_decode_command(CLI::App& bench, CommandContext& /*context*/) {
  auto options = std::make_shared<DecodeOptions>();
  CLI::App* command = bench.add_subcommand(
      "decode", "Generation with a KV cache: prefill and decode tokens/s beside the memory bound");
  command->add_option("--device", options->device, "host or cuda")->capture_default_str();
  command->add_option("--dtype", options->dtype, "float32, bfloat16 or float16")
      ->capture_default_str();
  command
      ->add_option("--model", options->model, "125m, 350m, 1b, 1p3b or LxHxC (a GPT, vocab 50257)")
      ->capture_default_str();
  command->add_option("--batch", options->batches, "Sequences per decode step (each its own run)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  command->add_option("--prompt", options->prompt, "Prompt tokens of each sequence")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--new-tokens", options->new_tokens, "Decode steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command
      ->add_option("--offload", options->offload,
                   "Where the weights live: none (the device), cpu or nvme (stage 3, read again "
                   "for every step; the bound is then their transfer)")
      ->capture_default_str();
  command
      ->add_option("--optimizer", options->optimizer,
                   "With the weights on the device: where the engine keeps a training run's "
                   "optimizer states, none (the device), cpu or nvme (stage 3)")
      ->capture_default_str();
  command->add_option("--nvme-path", options->nvme_path, "Swap folder for nvme")
      ->capture_default_str();
  command->add_option(
      "--device-memory-budget", options->device_memory_budget,
      "strata.device_memory_budget of the runs (16GiB, ...; default: the device's)");
  command
      ->add_option("--bound-params", options->bound_params,
                   "Host bounds: `strata bench membw --params` of the memory bound, and 4 bytes "
                   "each of the read stream")
      ->capture_default_str();
  command->add_flag("--json", options->json, "Print one JSON document");
  command->callback([options] { run_bench_decode(*options); });
}

}  // namespace strata::tools

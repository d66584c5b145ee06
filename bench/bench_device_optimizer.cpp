// `strata bench device-optimizer`: the optimizer kept on the device (gpu::Ops::adam_step, the
// fused pass the engine runs per sub-group with offload_optimizer none) beside a device-to-device
// copy of the same buffers measured in the same run, the bound of a pass that only streams
// memory. AdamW over fp32 master, moments and gradient moves 28 bytes a parameter (16 read, 12
// written), 30 with a bf16 copy; a copy of B bytes moves 2B. Both are timed between two events on
// the compute stream, best of the steps, alternated so that both see the same machine.
//
//   strata bench device-optimizer [--params 256M] [--steps 10] [--copy none|bf16] [--json]

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/error.h"
#include "base/units.h"
#include "bench/bench.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"

namespace strata::tools {
namespace {

struct DeviceOptimizerBenchOptions {
  std::string params = "256M";
  int steps = 10;
  std::string copy = "bf16";
  bool json = false;
};

// The target of a fused pass that streams 28-30 bytes a parameter: 0.8x the device's own copy rate.
constexpr double kTargetRatio = 0.8;

std::int64_t parse_count(const std::string& text) {
  const std::optional<std::int64_t> count = base::parse_count(text);
  if (!count || *count <= 0) {
    throw UserError("--params " + text + " is not a positive count",
                    "give a count such as 256M, 1.3G or 1000000", 2);
  }
  return *count;
}

struct Buffers {
  gpu::DeviceBuffer master, grads, exp_avg, exp_avg_sq, copy;
};

Buffers allocate(gpu::Device& device, std::int64_t n, bool with_copy) {
  Buffers b;
  b.master = device.allocate(n * 4, "bench fp32 master");
  b.grads = device.allocate(n * 4, "bench gradients");
  b.exp_avg = device.allocate(n * 4, "bench exp_avg");
  b.exp_avg_sq = device.allocate(n * 4, "bench exp_avg_sq");
  if (with_copy) b.copy = device.allocate(n * 2, "bench bf16 copy");
  gpu::Stream& stream = device.compute_stream();
  for (gpu::DeviceBuffer* buffer : {&b.master, &b.grads, &b.exp_avg, &b.exp_avg_sq})
    stream.fill_zero(buffer->data(), buffer->bytes());
  stream.synchronize();
  return b;
}

struct Times {
  double step_seconds = 1e30;
  double copy_seconds = 1e30;
};

Times measure(gpu::Device& device, gpu::Ops& ops, const Buffers& b, std::int64_t n, int steps) {
  gpu::Stream& stream = device.compute_stream();
  auto start = device.create_event();
  auto end = device.create_event();
  gpu::OptimizerArrays arrays{b.master.as<float>(),
                              b.grads.as<float>(),
                              b.exp_avg.as<float>(),
                              b.exp_avg_sq.as<float>(),
                              nullptr,
                              gpu::DataType::float32};
  if (b.copy) {
    arrays.param_copy = b.copy.data();
    arrays.copy_type = gpu::DataType::bfloat16;
  }
  const cpu_adam::AdamConfig config{.lr = 1e-4f, .weight_decay = 0.01f};
  Times times;
  // One untimed round of each first (clocks, caches, the kernels' first launch).
  for (int step = 0; step <= steps; ++step) {
    stream.record(*start);
    ops.adam_step(stream, config, step + 1, 1.0f, arrays, n);
    stream.record(*end);
    end->synchronize();
    if (step > 0) times.step_seconds = std::min(times.step_seconds, end->elapsed_ms(*start) / 1e3);
    // The bound: the master copied onto the gradients' buffer, n * 4 bytes read and written.
    stream.record(*start);
    stream.copy(b.grads.data(), b.master.data(), n * 4, gpu::CopyKind::device_to_device);
    stream.record(*end);
    end->synchronize();
    if (step > 0) times.copy_seconds = std::min(times.copy_seconds, end->elapsed_ms(*start) / 1e3);
  }
  return times;
}

void run_device_optimizer_bench(const DeviceOptimizerBenchOptions& options) {
  const std::int64_t n = parse_count(options.params);
  if (options.steps < 1) {
    throw UserError(fmt::format("--steps {} must be at least 1", options.steps),
                    "give a positive number of timed steps", 2);
  }
  if (options.copy != "none" && options.copy != "bf16") {
    throw UserError("--copy " + options.copy + " is not none or bf16",
                    "give --copy none (fp32 model) or --copy bf16", 2);
  }
  const bool with_copy = options.copy == "bf16";
  auto device = gpu::open_device({});
  auto ops = gpu::create_ops(*device);
  const Buffers buffers = allocate(*device, n, with_copy);
  const Times times = measure(*device, *ops, buffers, n, options.steps);
  const double step_bytes = static_cast<double>(n) * (with_copy ? 30.0 : 28.0);
  const double copy_bytes = static_cast<double>(n) * 8.0;  // n floats read and written
  const double step_gbps = step_bytes / times.step_seconds / 1e9;
  const double copy_gbps = copy_bytes / times.copy_seconds / 1e9;
  const double ratio = step_gbps / copy_gbps;
  if (options.json) {
    nlohmann::json out = {{"device", device->name()},
                          {"backend", gpu::to_string(device->kind())},
                          {"params", n},
                          {"copy", options.copy},
                          {"steps", options.steps},
                          {"bytes_per_param", with_copy ? 30 : 28},
                          {"step_seconds", times.step_seconds},
                          {"params_per_second", static_cast<double>(n) / times.step_seconds},
                          {"step_gbps", step_gbps},
                          {"d2d_copy_gbps", copy_gbps},
                          {"ratio", ratio},
                          {"target_ratio", kTargetRatio}};
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print(
      "strata bench device-optimizer: {} ({}), AdamW over {} parameters, {} bytes each ({}), "
      "best of {} steps, GB/s = 1e9 bytes/s\n",
      device->name(), gpu::to_string(device->kind()), n, with_copy ? 30 : 28,
      with_copy ? "fp32 states, bf16 copy" : "fp32 states, no copy", options.steps);
  fmt::print("{:<22} {:>12} {:>12}\n", "", "seconds", "GB/s");
  fmt::print("{:<22} {:>12.6f} {:>12.2f}\n", "optimizer step", times.step_seconds, step_gbps);
  fmt::print("{:<22} {:>12.6f} {:>12.2f}\n", "d2d copy (bound)", times.copy_seconds, copy_gbps);
  fmt::print("ratio {:.3f}: {}\n", ratio,
             ratio >= kTargetRatio ? "at the target (>= 0.8x the device's copy rate)"
                                   : "below the target of 0.8x the device's copy rate");
}

}  // namespace

void add_bench_device_optimizer_command(CLI::App& bench, CommandContext& /*context*/) {
  auto options = std::make_shared<DeviceOptimizerBenchOptions>();
  CLI::App* command = bench.add_subcommand(
      "device-optimizer",
      "The optimizer kept on the device (one fused AdamW pass) beside a device-to-device copy");
  command->add_option("--params", options->params, "Parameters stepped, such as 256M or 1.3G")
      ->capture_default_str();
  command->add_option("--steps", options->steps, "Timed steps (best is reported)")
      ->capture_default_str();
  command->add_option("--copy", options->copy, "The parameter copy written: none or bf16")
      ->capture_default_str();
  command->add_flag("--json", options->json, "Print one JSON document on stdout");
  command->callback([options] { run_device_optimizer_bench(*options); });
}

}  // namespace strata::tools

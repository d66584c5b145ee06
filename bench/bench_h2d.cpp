// `strata bench h2d`: pinned host <-> device copies through the engine's own path (gpu::Stream
// copies on the device's H2D and D2H streams, timed with gpu::Event), beside the plain copy of
// the same bytes between the same buffers measured in the same run: memcpy on the host device
// (the bound: a stream copy is one memcpy on the stream's worker thread), cudaMemcpyAsync once
// the CUDA backend exists. Also the cost of one stream round trip (enqueue a no-op task, wait).
//
//   strata bench h2d [--size 256MiB] [--steps 10] [--json]

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/by_index.h"
#include "base/error.h"
#include "base/units.h"
#include "bench/bench_copy.h"
#include "gpu/open_device.h"
#include "tools/commands.h"

namespace strata::tools {
namespace {

struct H2dBenchOptions {
  std::string size = "256MiB";
  int steps = 10;
  bool json = false;
};

struct CopyFigure {
  std::string direction;
  double engine_gbps = 0;  // best of the steps, 1e9 bytes/s
  double plain_gbps = 0;
};

using Clock = std::chrono::steady_clock;

double gbps(std::int64_t bytes, double seconds) {
  return static_cast<double>(bytes) / seconds / 1e9;
}

// Median microseconds of a no-op task enqueued on the compute stream and waited for.
double round_trip_us(gpu::Device& device, int count) {
  base::ByIndex<double> samples(count);
  for (int i = 0; i < count; ++i) {
    auto begin = Clock::now();
    device.compute_stream().launch([] {});
    device.compute_stream().synchronize();
    samples[i] = std::chrono::duration<double, std::micro>(Clock::now() - begin).count();
  }
  std::nth_element(samples.begin(), samples.begin() + count / 2, samples.end());
  return samples[count / 2];
}

void run_h2d_bench(const H2dBenchOptions& options) {
  auto parsed = base::parse_bytes(options.size);
  if (!parsed || *parsed <= 0) {
    throw UserError("--size " + options.size + " is not a byte size",
                    "give a size such as 256MiB, 1G or 4096", 2);
  }
  if (options.steps < 1) {
    throw UserError(fmt::format("--steps {} must be at least 1", options.steps),
                    "give a positive number of timed copies", 2);
  }
  const std::int64_t bytes = *parsed;
  gpu::DeviceOptions device_options;
  device_options.memory_budget_bytes = 0;
  auto device = gpu::open_device(device_options);
  gpu::PinnedBuffer pinned = device->allocate_pinned(bytes);
  gpu::PinnedBuffer pinned_back = device->allocate_pinned(bytes);
  gpu::DeviceBuffer on_device = device->allocate(bytes, "bench h2d buffer");
  std::memset(pinned.data(), 0x3C, static_cast<std::size_t>(bytes));
  std::memset(pinned_back.data(), 0, static_cast<std::size_t>(bytes));

  // On the host device "device memory" is host memory, so the plain copy is memcpy between the
  // same two buffers; on CUDA it will be cudaMemcpyAsync.
  const bench::CopyTimes h2d =
      bench::copy_times(*device, device->h2d_stream(), on_device.data(), pinned.data(), bytes,
                        gpu::CopyKind::host_to_device, options.steps);
  const bench::CopyTimes d2h =
      bench::copy_times(*device, device->d2h_stream(), pinned_back.data(), on_device.data(), bytes,
                        gpu::CopyKind::device_to_host, options.steps);
  std::vector<CopyFigure> figures = {
      {"h2d", gbps(bytes, h2d.engine_seconds), gbps(bytes, h2d.plain_seconds)},
      {"d2h", gbps(bytes, d2h.engine_seconds), gbps(bytes, d2h.plain_seconds)},
  };
  double latency_us = round_trip_us(*device, 2000);

  if (options.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const CopyFigure& figure : figures) {
      rows.push_back({{"direction", figure.direction},
                      {"engine_gbps", figure.engine_gbps},
                      {"plain_gbps", figure.plain_gbps},
                      {"ratio", figure.engine_gbps / figure.plain_gbps}});
    }
    nlohmann::json out = {{"device", device->name()}, {"backend", gpu::to_string(device->kind())},
                          {"bytes", bytes},           {"steps", options.steps},
                          {"copies", rows},           {"stream_round_trip_us", latency_us}};
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("strata bench h2d: {} ({}), {} per copy, best of {} steps, GB/s = 1e9 bytes/s\n",
             device->name(), gpu::to_string(device->kind()),
             base::format_bytes(static_cast<double>(bytes)), options.steps);
  fmt::print("{:<10} {:>14} {:>14} {:>8}  {}\n", "direction", "engine GB/s", "plain GB/s", "ratio",
             "verdict");
  for (const CopyFigure& figure : figures) {
    double ratio = figure.engine_gbps / figure.plain_gbps;
    fmt::print("{:<10} {:>14.2f} {:>14.2f} {:>8.3f}  {}\n", figure.direction, figure.engine_gbps,
               figure.plain_gbps, ratio,
               ratio >= 0.9 ? "at the bound (>= 0.9x plain)" : "below 0.9x of the plain copy");
  }
  fmt::print("stream round trip (no-op task, enqueue to synchronize): {:.1f} us median\n",
             latency_us);
}

}  // namespace

// Declared in bench/bench.h and listed in bench.cpp's kBenchCommands.
void add_bench_h2d_command(CLI::App& bench, CommandContext& context);

void add_bench_h2d_command(CLI::App& bench, CommandContext& /*context*/) {
  auto options = std::make_shared<H2dBenchOptions>();
  CLI::App* command = bench.add_subcommand(
      "h2d", "Pinned H2D and D2H copies through the device's streams beside a plain copy");
  command->add_option("--size", options->size, "Bytes per copy, such as 256MiB or 1G")
      ->capture_default_str();
  command->add_option("--steps", options->steps, "Timed copies per direction (best is reported)")
      ->capture_default_str();
  command->add_flag("--json", options->json, "Print one JSON document on stdout");
  command->callback([options] { run_h2d_bench(*options); });
}

}  // namespace strata::tools

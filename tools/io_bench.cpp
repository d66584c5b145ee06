// strata io-bench: NVMe throughput through aio::Engine, as fio would measure it.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "base/error.h"
#include "base/units.h"
#include "tools/commands.h"
#include "tools/io_bench_sweep.h"

namespace strata::tools {
namespace {

struct IoBenchArgs {
  std::string path;
  std::string size = "4G";
  std::string rw = "read";
  std::string block_size = "1M";
  int queue_depth = 32;
  int threads = 1;
  std::string direct = "on";
  std::string verify = "off";
  std::string single_submit = "off";
  std::string overlap_events = "on";
  int loops = 1;
  bool json = false;
  bool sweep = false;
  std::string csv = "io-sweep.csv";
  bool keep = false;
};

std::int64_t parse_size(const std::string& text, const char* flag) {
  auto bytes = base::parse_bytes(text);
  if (!bytes || *bytes <= 0 || *bytes % 4096 != 0) {
    throw UserError(fmt::format("{} {} is not a positive multiple of 4 KiB", flag, text),
                    fmt::format("write {} as 4096, 128K, 1M, 4G ...", flag), 2);
  }
  return *bytes;
}

io::Rw parse_rw(const std::string& text) {
  if (text == "read") return io::Rw::read;
  if (text == "write") return io::Rw::write;
  if (text == "randread") return io::Rw::randread;
  return io::Rw::randwrite;  // CLI11 checked the set
}

io::RunConfig make_config(const IoBenchArgs& args) {
  io::RunConfig config;
  config.dir = args.path;
  config.size_bytes = parse_size(args.size, "--size");
  config.rw = parse_rw(args.rw);
  config.block_size_bytes = parse_size(args.block_size, "--block-size");
  config.queue_depth = args.queue_depth;
  config.threads = args.threads;
  config.direct = args.direct == "on";
  config.verify = args.verify == "on";
  config.single_submit = args.single_submit == "on";
  config.overlap_events = args.overlap_events == "on";
  if (config.size_bytes < config.block_size_bytes) {
    throw UserError(
        fmt::format("--size {} is smaller than --block-size {}", args.size, args.block_size),
        "pass a --size of at least one block", 2);
  }
  return config;
}

void print_header(const io::RunConfig& config, bool direct_used, const std::string& backend) {
  std::string cache = !config.direct ? "O_DIRECT off: figures include the page cache"
                      : direct_used  ? "O_DIRECT on: the page cache is bypassed"
                                     : "O_DIRECT refused by this file system: figures include "
                                       "the page cache";
  fmt::print(
      "io-bench: {} {} of {}, block {}, queue depth {}, {} thread(s), {}, verify {}, "
      "single_submit {}, overlap_events {}\n",
      io::to_string(config.rw), base::format_bytes(static_cast<double>(config.size_bytes)),
      io::bench_file(config.dir).string(),
      base::format_bytes(static_cast<double>(config.block_size_bytes)), config.queue_depth,
      config.threads, backend, config.verify ? "on" : "off", config.single_submit ? "on" : "off",
      config.overlap_events ? "on" : "off");
  fmt::print("{}\n", cache);
  fmt::print("{:>5} {:>9} {:>10} {:>10} {:>10} {:>9}\n", "loop", "GB/s", "IOPS", "p50 us", "p99 us",
             "seconds");
}

void print_row(const io::RunResult& result) {
  fmt::print("{:>5} {:>9.3f} {:>10.0f} {:>10.1f} {:>10.1f} {:>9.3f}\n", result.loop, result.gbps,
             result.iops, result.lat_p50_us, result.lat_p99_us, result.seconds);
}

void run_single(const io::RunConfig& config, int loops, bool json) {
  std::vector<io::RunResult> results = io::run(config, loops);
  if (json) {
    for (const auto& result : results)
      fmt::print("{}\n", io::to_json(result).dump());
    return;
  }
  print_header(config, results.front().direct_used, results.front().backend);
  for (const auto& result : results)
    print_row(result);
  if (results.size() > 1) {
    std::vector<double> gbps;
    for (const auto& result : results)
      gbps.push_back(result.gbps);
    std::sort(gbps.begin(), gbps.end());
    fmt::print("median {:.3f} GB/s over {} loops (GB = 1e9 bytes)\n", gbps[gbps.size() / 2],
               gbps.size());
  }
}

void run_sweep(const io::RunConfig& config, const IoBenchArgs& args) {
  io::Grid grid = io::full_grid(static_cast<int>(std::thread::hardware_concurrency()));
  if (!args.json) {
    fmt::print("io-bench --sweep: {} of {} per point, {}, O_DIRECT {}\n", io::to_string(config.rw),
               base::format_bytes(static_cast<double>(config.size_bytes)),
               io::bench_file(config.dir).string(), config.direct ? "on" : "off");
  }
  auto results = io::sweep(config, grid, [&](const io::RunResult& result) {
    if (args.json) fmt::print("{}\n", io::to_json(result).dump());
  });
  std::string written = io::write_csv_and_plot(results, args.csv);
  auto best = std::max_element(results.begin(), results.end(),
                               [](const auto& a, const auto& b) { return a.gbps < b.gbps; });
  if (args.json) {
    std::fprintf(stderr, "%s\n", written.c_str());
    return;
  }
  fmt::print("{}\n", written);
  fmt::print(
      "best: {:.3f} GB/s at block {}, queue depth {}, {} thread(s), single_submit {}, "
      "overlap_events {}\n",
      best->gbps, base::format_bytes(static_cast<double>(best->config.block_size_bytes)),
      best->config.queue_depth, best->config.threads, best->config.single_submit ? "on" : "off",
      best->config.overlap_events ? "on" : "off");
}

// Prepares the test file, runs, and removes the file unless --keep, saying so (on stderr with
// --json, whose stdout holds JSON only); a failed run removes it too.
void run_io_bench(const IoBenchArgs& args) {
  io::RunConfig config = make_config(args);
  io::check_path(config.dir, config.size_bytes);
  std::FILE* notes = args.json ? stderr : stdout;
  try {
    if (io::prepare_file(config)) {
      fmt::print(notes,
                 "io-bench: wrote the {} test file {} first (reads must hit written blocks)\n",
                 base::format_bytes(static_cast<double>(config.size_bytes)),
                 io::bench_file(config.dir).string());
    }
    if (args.sweep)
      run_sweep(config, args);
    else
      run_single(config, args.loops, args.json);
  } catch (...) {
    fmt::print(stderr, "io-bench: {}\n", io::finish_test_file(config, args.keep));
    throw;
  }
  fmt::print(notes, "io-bench: {}\n", io::finish_test_file(config, args.keep));
}

}  // namespace

void add_io_bench_command(CLI::App& app, CommandContext& /*context*/) {
  auto* command = app.add_subcommand(
      "io-bench", "Measure NVMe throughput through strata's io_uring engine (O_DIRECT by default)");
  auto args = std::make_shared<IoBenchArgs>();
  command->add_option("--path", args->path, "Directory for the test file strata-io-bench.dat")
      ->required();
  command->add_option("--size", args->size, "Bytes per run, and the test file's size")
      ->capture_default_str();
  command->add_option("--rw", args->rw, "read, write, randread or randwrite")
      ->check(CLI::IsMember({"read", "write", "randread", "randwrite"}))
      ->capture_default_str();
  command->add_option("--block-size", args->block_size, "Bytes per request (aio block_size)")
      ->capture_default_str();
  command->add_option("--queue-depth", args->queue_depth, "Requests in flight per ring")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  command->add_option("--threads", args->threads, "Rings, one thread each (intra_op_parallelism)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  command->add_option("--direct", args->direct, "O_DIRECT: on bypasses the page cache")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  command->add_option("--verify", args->verify, "CRC32C per 4 KiB sector, checked on reads")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  command->add_option("--single-submit", args->single_submit, "One system call per request")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  command->add_option("--overlap-events", args->overlap_events, "Refill as completions arrive")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  command->add_option("--loops", args->loops, "Runs, each of --size bytes")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  command->add_flag("--json", args->json, "One JSON object per run on stdout (JSON Lines)");
  command->add_flag("--sweep", args->sweep,
                    "Run the grid block 128K..8M x queue depth 1..128 x threads 1..cores x "
                    "single_submit x overlap_events; write a CSV and a PNG");
  command->add_option("--csv", args->csv, "Where --sweep writes its CSV (the PNG goes beside it)")
      ->capture_default_str();
  command->add_flag("--keep", args->keep,
                    "Leave the test file for the next run (default: remove it at the end)");
  command->callback([args] { run_io_bench(*args); });
}

}  // namespace strata::tools

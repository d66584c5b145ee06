// strata io-tune: a shortened io-bench sweep for read and for write, then the best DeepSpeed
// `aio` block (highest read + write GB/s at one setting, as ds_nvme_tune picks it).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/units.h"
#include "tools/commands.h"
#include "tools/io_bench_sweep.h"

namespace strata::tools {
namespace {

struct IoTuneArgs {
  std::string path;
  std::string size = "1G";
  std::string direct = "on";
  bool json = false;
  bool keep = false;
};

struct Setting {
  io::RunConfig config;
  double read_gbps = 0;
  double write_gbps = 0;
  double total() const { return read_gbps + write_gbps; }
};

// Runs read and write at every point of `grid`; returns the settings with both figures.
std::vector<Setting> measure(const io::RunConfig& base, const io::Grid& grid,
                             std::vector<io::RunResult>& all) {
  io::RunConfig read = base;
  read.rw = io::Rw::read;
  io::RunConfig write = base;
  write.rw = io::Rw::write;
  std::vector<io::RunResult> reads = io::sweep(read, grid, {});
  std::vector<io::RunResult> writes = io::sweep(write, grid, {});
  std::vector<Setting> settings;
  for (std::size_t i = 0; i < reads.size(); ++i) {
    settings.push_back(Setting{reads[i].config, reads[i].gbps, writes[i].gbps});
  }
  all.insert(all.end(), reads.begin(), reads.end());
  all.insert(all.end(), writes.begin(), writes.end());
  return settings;
}

Setting best_of(const std::vector<Setting>& settings) {
  return *std::max_element(settings.begin(), settings.end(),
                           [](const auto& a, const auto& b) { return a.total() < b.total(); });
}

nlohmann::json aio_block(const io::RunConfig& config) {
  nlohmann::json block = nlohmann::json::object();
  block["block_size"] = config.block_size_bytes;
  block["queue_depth"] = config.queue_depth;
  block["intra_op_parallelism"] = config.threads;
  block["single_submit"] = config.single_submit;
  block["overlap_events"] = config.overlap_events;
  return block;
}

// The first sweep over block, queue depth and threads, then the submission modes at the best
// point; every run goes into `all`.
Setting tune(const io::RunConfig& base, bool json, std::vector<io::RunResult>& all) {
  int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  io::Grid grid;
  grid.block_sizes_bytes = {128 << 10, 1 << 20, 8 << 20};
  grid.queue_depths = {8, 32, 128};
  grid.threads = cores > 1 ? std::vector<int>{1, cores} : std::vector<int>{1};
  grid.single_submit = {false};
  grid.overlap_events = {true};
  if (!json) {
    fmt::print("io-tune: {} per run on {}, O_DIRECT {}, {} settings x read and write\n",
               base::format_bytes(static_cast<double>(base.size_bytes)),
               io::bench_file(base.dir).string(), base.direct ? "on" : "off",
               grid.block_sizes_bytes.size() * grid.queue_depths.size() * grid.threads.size());
  }
  Setting best = best_of(measure(base, grid, all));
  io::Grid modes{{best.config.block_size_bytes},
                 {best.config.queue_depth},
                 {best.config.threads},
                 {false, true},
                 {true, false}};
  std::vector<Setting> refined = measure(best.config, modes, all);
  refined.push_back(best);
  return best_of(refined);
}

void print_best(const io::RunConfig& base, const Setting& best,
                const std::vector<io::RunResult>& all, bool json) {
  nlohmann::json block = aio_block(best.config);
  if (json) {
    nlohmann::json out = {{"aio", block},
                          {"read_gbps", best.read_gbps},
                          {"write_gbps", best.write_gbps},
                          {"size", base.size_bytes},
                          {"direct", base.direct},
                          {"runs", nlohmann::json::array()}};
    for (const auto& run : all)
      out["runs"].push_back(io::to_json(run));
    fmt::print("{}\n", out.dump());
    return;
  }
  fmt::print(
      "best: read {:.3f} GB/s, write {:.3f} GB/s (GB = 1e9 bytes); paste into the "
      "DeepSpeed config:\n",
      best.read_gbps, best.write_gbps);
  fmt::print("\"aio\": {}\n", block.dump(2));
}

// Checks the path, tunes, and removes the test file unless --keep, saying so (on stderr with
// --json, whose stdout holds JSON only); a failed run removes it too.
void run_io_tune(const IoTuneArgs& args) {
  io::RunConfig base;
  base.dir = args.path;
  auto size = base::parse_bytes(args.size);
  if (!size || *size < (8 << 20) || *size % 4096 != 0) {
    throw UserError(fmt::format("--size {} is not a multiple of 4 KiB of at least 8M", args.size),
                    "write --size as 256M, 1G, 4G ...", 2);
  }
  base.size_bytes = *size;
  base.direct = args.direct == "on";
  io::check_path(base.dir, base.size_bytes);
  std::FILE* notes = args.json ? stderr : stdout;
  std::vector<io::RunResult> all;
  Setting best;
  try {
    if (io::prepare_file(base)) {
      fmt::print(notes,
                 "io-tune: wrote the {} test file {} first (reads must hit written blocks)\n",
                 base::format_bytes(static_cast<double>(base.size_bytes)),
                 io::bench_file(base.dir).string());
    }
    best = tune(base, args.json, all);
  } catch (...) {
    fmt::print(stderr, "io-tune: {}\n", io::finish_test_file(base, args.keep));
    throw;
  }
  print_best(base, best, all, args.json);
  fmt::print(notes, "io-tune: {}\n", io::finish_test_file(base, args.keep));
}

}  // namespace

void add_io_tune_command(CLI::App& app, CommandContext& /*context*/) {
  auto* command = app.add_subcommand(
      "io-tune", "Find the best DeepSpeed \"aio\" block for a disk (a shortened io-bench sweep)");
  auto args = std::make_shared<IoTuneArgs>();
  command->add_option("--path", args->path, "Directory on the disk to tune (nvme_path)")
      ->required();
  command->add_option("--size", args->size, "Bytes per run, and the test file's size")
      ->capture_default_str();
  command->add_option("--direct", args->direct, "O_DIRECT: on bypasses the page cache")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  command->add_flag("--json", args->json, "One JSON object on stdout");
  command->add_flag("--keep", args->keep,
                    "Leave the test file for the next run (default: remove it at the end)");
  command->callback([args] { run_io_tune(*args); });
}

}  // namespace strata::tools

#include "tools/io_bench_sweep.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <random>

#include "aio/aligned_buffer.h"
#include "aio/engine.h"
#include "base/error.h"
#include "base/units.h"
#include "tools/io_plot_script.h"

namespace strata::tools::io {
namespace {

namespace fs = std::filesystem;

// Memory the benchmark's buffers may take, whatever the block size and queue depth.
constexpr std::int64_t buffer_bytes_max = std::int64_t{1} << 30;

fs::path filled_marker(const fs::path& dir) {
  fs::path marker = bench_file(dir);
  marker += ".filled";
  return marker;
}

std::int64_t filled_bytes(const fs::path& dir) {
  std::ifstream marker(filled_marker(dir));
  std::int64_t bytes = 0;
  if (!(marker >> bytes)) return 0;
  std::error_code error;
  auto size = fs::file_size(bench_file(dir), error);
  if (error) return 0;
  return std::min(bytes, static_cast<std::int64_t>(size));
}

// Incompressible bytes (xorshift), so that a drive that compresses or deduplicates zeros does
// not flatter the figures.
void fill_random(std::span<std::byte> buffer, std::uint64_t seed) {
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t i = 0; i + 8 <= buffer.size(); i += 8) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::memcpy(buffer.data() + i, &state, 8);
  }
}

aio::EngineOptions engine_options(const RunConfig& config, int tickets) {
  aio::EngineOptions options;
  options.block_size_bytes = config.block_size_bytes;
  options.queue_depth = config.queue_depth;
  options.thread_count = config.threads;
  options.single_submit = config.single_submit;
  options.overlap_events = config.overlap_events;
  options.verify_checksums = config.verify;
  options.direct = config.direct ? aio::DirectMode::optional : aio::DirectMode::off;
  options.record_latency = true;
  options.tickets_max = tickets + 4;
  return options;
}

// Sequential: windows of half of block_size x queue_depth x threads bytes, four in flight, each
// into its own quarter of the buffer so that reads never land on top of each other
// (verification reads the bytes it checks). While the oldest window is waited for, the rings
// still hold a window and a half beyond what they have in flight: with two windows of a full
// queue each, the rings would have nothing queued by the time the oldest finished, and until this
// thread woke and submitted the next window every completion would lower the queue depth.
constexpr int sequential_windows = 4;

void run_sequential(aio::Engine& engine, aio::File& file, const RunConfig& config,
                    aio::AlignedBuffer& buffer, std::int64_t window) {
  constexpr int depth = sequential_windows;
  std::array<aio::Ticket, depth> tickets;
  // Window n's ticket, in the ring of `depth`.
  auto ticket = [&tickets](std::int64_t n) -> aio::Ticket& {
    return tickets[static_cast<std::size_t>(n % depth)];
  };
  std::int64_t issued = 0;
  std::int64_t waited = 0;
  for (std::int64_t offset = 0; offset < config.size_bytes; offset += window) {
    if (issued - waited == depth) engine.wait(ticket(waited++));
    std::int64_t length = std::min(window, config.size_bytes - offset);
    auto span = buffer.span().subspan(static_cast<std::size_t>((issued % depth) * window),
                                      static_cast<std::size_t>(length));
    ticket(issued++) = is_read(config.rw) ? engine.submit_read(file, offset, span)
                                          : engine.submit_write(file, offset, span);
  }
  while (waited < issued)
    engine.wait(ticket(waited++));
}

// Random: every block once, in a seeded random order (fio's random map), one ticket per block,
// 2 x queue_depth x threads tickets outstanding so that every ring stays full.
void run_random(aio::Engine& engine, aio::File& file, const RunConfig& config,
                aio::AlignedBuffer& buffer, const std::vector<std::int64_t>& order,
                std::vector<aio::Ticket>& tickets) {
  auto outstanding = static_cast<std::int64_t>(tickets.size());
  // Block n's ticket (the n-th issued), in the ring of `outstanding`.
  auto ticket = [&tickets, outstanding](std::int64_t n) -> aio::Ticket& {
    return tickets[static_cast<std::size_t>(n % outstanding)];
  };
  std::int64_t slots = buffer.size_bytes() / config.block_size_bytes;
  std::int64_t issued = 0;
  std::int64_t waited = 0;
  for (std::int64_t block : order) {
    if (issued - waited == outstanding) engine.wait(ticket(waited++));
    auto span =
        buffer.span().subspan(static_cast<std::size_t>((issued % slots) * config.block_size_bytes),
                              static_cast<std::size_t>(config.block_size_bytes));
    std::int64_t offset = block * config.block_size_bytes;
    ticket(issued++) = is_read(config.rw) ? engine.submit_read(file, offset, span)
                                          : engine.submit_write(file, offset, span);
  }
  while (waited < issued)
    engine.wait(ticket(waited++));
}

std::string size_label(std::int64_t bytes) {
  if (bytes % (1 << 20) == 0) return fmt::format("{}M", bytes >> 20);
  if (bytes % (1 << 10) == 0) return fmt::format("{}K", bytes >> 10);
  return std::to_string(bytes);
}

}  // namespace

std::string_view to_string(Rw rw) {
  switch (rw) {
    case Rw::read:
      return "read";
    case Rw::write:
      return "write";
    case Rw::randread:
      return "randread";
    case Rw::randwrite:
      return "randwrite";
  }
  return "?";
}

bool is_read(Rw rw) {
  return rw == Rw::read || rw == Rw::randread;
}

fs::path bench_file(const fs::path& dir) {
  return dir / "strata-io-bench.dat";
}

void check_path(const fs::path& dir, std::int64_t size_bytes) {
  std::error_code error;
  fs::file_status status = fs::status(dir, error);
  if (!fs::exists(status)) {
    throw UserError(fmt::format("--path {} does not exist", dir.string()),
                    "create the directory first (mkdir -p), or pass one that exists", 2);
  }
  if (!fs::is_directory(status)) {
    throw UserError(fmt::format("--path {} is not a directory", dir.string()),
                    "pass the directory that should hold the test file", 2);
  }
  // Creating a file is the only honest test: access(W_OK) says yes to root on a read-only mount.
  fs::path probe = dir / fmt::format(".strata-io-bench-probe-{}", ::getpid());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    throw UserError(
        fmt::format("--path {} is not writable: {}", dir.string(), std::strerror(errno)),
        "pass a directory this user can write to, or change its permissions", 2);
  }
  ::close(fd);
  ::unlink(probe.c_str());
  struct statvfs info {};
  if (::statvfs(dir.c_str(), &info) != 0) {
    throw UserError(fmt::format("cannot read the free space of --path {}: {}", dir.string(),
                                std::strerror(errno)),
                    "pass a directory on a local file system", 2);
  }
  auto free_bytes =
      static_cast<std::int64_t>(info.f_bavail) * static_cast<std::int64_t>(info.f_frsize);
  std::int64_t existing = 0;
  if (auto size = fs::file_size(bench_file(dir), error); !error) {
    existing = static_cast<std::int64_t>(size);
  }
  std::int64_t needed = size_bytes - existing;
  if (needed > free_bytes) {
    throw UserError(
        fmt::format("--path {} lacks the free space asked for: the {} test file needs {} more, "
                    "{} is free",
                    dir.string(), base::format_bytes(static_cast<double>(size_bytes)),
                    base::format_bytes(static_cast<double>(needed)),
                    base::format_bytes(static_cast<double>(free_bytes))),
        "free space there, pass a smaller --size, or another --path", 2);
  }
}

bool prepare_file(const RunConfig& config) {
  bool has_sidecar = fs::exists(aio::sidecar_path(bench_file(config.dir)));
  if (filled_bytes(config.dir) >= config.size_bytes && (!config.verify || has_sidecar)) {
    return false;
  }
  aio::remove_file(bench_file(config.dir));
  fs::remove(filled_marker(config.dir));
  RunConfig fill = config;
  fill.rw = Rw::write;
  fill.block_size_bytes = 1 << 20;
  fill.queue_depth = 16;
  fill.threads = 1;
  fill.single_submit = false;
  fill.overlap_events = true;
  (void)run(fill, 1);
  std::ofstream marker(filled_marker(config.dir));
  marker << config.size_bytes << "\n";
  return true;
}

std::string finish_test_file(const RunConfig& config, bool keep) {
  const fs::path file = bench_file(config.dir);
  std::error_code error;
  const std::uintmax_t size = fs::file_size(file, error);
  const std::string sized =
      error ? file.string()
            : fmt::format("{} ({})", file.string(), base::format_bytes(static_cast<double>(size)));
  if (keep) return fmt::format("kept the test file {} for the next run (--keep)", sized);
  aio::remove_file(file);
  fs::remove(filled_marker(config.dir), error);
  return fmt::format("removed the test file {} (--keep leaves it for the next run)", sized);
}

std::vector<RunResult> run(const RunConfig& config, int loops) {
  bool random = config.rw == Rw::randread || config.rw == Rw::randwrite;
  std::int64_t block = config.block_size_bytes;
  std::int64_t in_flight = block * config.queue_depth * config.threads;
  // Sequential: sequential_windows windows of half of in_flight bytes (at least a block each).
  // Random: one block per outstanding ticket, fewer slots (shared by several tickets) when that
  // would pass buffer_bytes_max.
  std::int64_t window =
      std::min({in_flight / 2, config.size_bytes, buffer_bytes_max / sequential_windows});
  window = std::max(window / block * block, std::min(block, config.size_bytes));
  std::int64_t outstanding =
      random ? 2LL * config.queue_depth * config.threads : std::int64_t{sequential_windows};
  std::int64_t buffer_bytes =
      random ? std::min(outstanding * block, buffer_bytes_max) : sequential_windows * window;
  if (random && config.verify) outstanding = buffer_bytes / block;

  aio::Engine engine(engine_options(config, static_cast<int>(outstanding)));
  fs::path path = bench_file(config.dir);
  if (!config.verify && !is_read(config.rw)) {
    fs::remove(aio::sidecar_path(path));  // unverified writes make old checksums wrong
  }
  aio::File file =
      engine.open(path, is_read(config.rw) ? aio::OpenMode::read : aio::OpenMode::create);
  if (!is_read(config.rw)) file.allocate(config.size_bytes);
  aio::AlignedBuffer buffer(buffer_bytes);
  if (!is_read(config.rw)) fill_random(buffer.span(), 1);
  std::vector<std::int64_t> order;
  std::vector<aio::Ticket> tickets(static_cast<std::size_t>(outstanding));
  if (random) {
    order.resize(static_cast<std::size_t>(config.size_bytes / block));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(1));
  }

  std::vector<RunResult> results;
  for (int loop = 0; loop < loops; ++loop) {
    engine.latency().clear();
    auto start = std::chrono::steady_clock::now();
    if (random)
      run_random(engine, file, config, buffer, order, tickets);
    else
      run_sequential(engine, file, config, buffer, window);
    std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    RunResult result;
    result.config = config;
    result.loop = loop;
    result.bytes = random ? static_cast<std::int64_t>(order.size()) * block : config.size_bytes;
    result.seconds = elapsed.count();
    result.gbps = static_cast<double>(result.bytes) / result.seconds / 1e9;
    result.iops = static_cast<double>(engine.latency().count()) / result.seconds;
    result.lat_p50_us = static_cast<double>(engine.latency().percentile_ns(0.50)) / 1e3;
    result.lat_p99_us = static_cast<double>(engine.latency().percentile_ns(0.99)) / 1e3;
    result.direct_used = file.direct();
    result.backend = std::string(aio::to_string(engine.backend()));
    results.push_back(result);
  }
  if (config.verify && !is_read(config.rw)) file.sync();  // the sidecar, outside the timing
  return results;
}

nlohmann::json to_json(const RunResult& result) {
  const RunConfig& config = result.config;
  return {{"rw", to_string(config.rw)},
          {"block_size", config.block_size_bytes},
          {"queue_depth", config.queue_depth},
          {"threads", config.threads},
          {"single_submit", config.single_submit},
          {"overlap_events", config.overlap_events},
          {"direct", result.direct_used},
          {"verify", config.verify},
          {"backend", result.backend},
          {"path", bench_file(config.dir).string()},
          {"loop", result.loop},
          {"bytes", result.bytes},
          {"seconds", result.seconds},
          {"gbps", result.gbps},
          {"iops", result.iops},
          {"lat_p50_us", result.lat_p50_us},
          {"lat_p99_us", result.lat_p99_us}};
}

Grid full_grid(int cores) {
  Grid grid;
  for (std::int64_t block = 128 << 10; block <= 8 << 20; block *= 2) {
    grid.block_sizes_bytes.push_back(block);
  }
  grid.queue_depths = {1, 2, 4, 8, 16, 32, 64, 128};
  for (int threads = 1; threads <= std::max(cores, 1); threads *= 2)
    grid.threads.push_back(threads);
  grid.single_submit = {false, true};
  grid.overlap_events = {true, false};
  return grid;
}

std::vector<RunResult> sweep(const RunConfig& base, const Grid& grid,
                             const std::function<void(const RunResult&)>& on_result) {
  std::vector<RunConfig> points;
  for (std::int64_t block : grid.block_sizes_bytes) {
    for (int depth : grid.queue_depths) {
      for (int threads : grid.threads) {
        for (bool single : grid.single_submit) {
          for (bool overlap : grid.overlap_events) {
            RunConfig point = base;
            point.block_size_bytes = block;
            point.queue_depth = depth;
            point.threads = threads;
            point.single_submit = single;
            point.overlap_events = overlap;
            points.push_back(point);
          }
        }
      }
    }
  }
  bool terminal = ::isatty(STDERR_FILENO) != 0;
  auto start = std::chrono::steady_clock::now();
  std::vector<RunResult> results;
  for (std::size_t i = 0; i < points.size(); ++i) {
    results.push_back(run(points[i], 1).front());
    if (on_result) on_result(results.back());
    if (!terminal) continue;
    std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    double eta =
        elapsed.count() / static_cast<double>(i + 1) * static_cast<double>(points.size() - i - 1);
    constexpr int width = 30;
    auto filled = static_cast<int>(width * (i + 1) / points.size());
    const RunResult& last = results.back();
    std::fprintf(
        stderr, "\r[%s%s] %zu/%zu  bs %-4s qd %-3d t %-2d ss %-3s ov %-3s %6.2f GB/s  ETA %.0fs ",
        std::string(static_cast<std::size_t>(filled), '#').c_str(),
        std::string(static_cast<std::size_t>(width - filled), '.').c_str(), i + 1, points.size(),
        size_label(last.config.block_size_bytes).c_str(), last.config.queue_depth,
        last.config.threads, last.config.single_submit ? "on" : "off",
        last.config.overlap_events ? "on" : "off", last.gbps, eta);
    std::fflush(stderr);
  }
  if (terminal) std::fprintf(stderr, "\n");
  return results;
}

std::string write_csv_and_plot(const std::vector<RunResult>& results, const fs::path& csv_path) {
  std::ofstream csv(csv_path);
  csv << "rw,block_size,queue_depth,threads,single_submit,overlap_events,direct,bytes,seconds,"
         "gbps,iops,lat_p50_us,lat_p99_us\n";
  std::map<std::int64_t, std::map<int, double>> best;  // block size -> queue depth -> GB/s
  for (const RunResult& result : results) {
    const RunConfig& c = result.config;
    csv << fmt::format("{},{},{},{},{},{},{},{},{:.6f},{:.4f},{:.1f},{:.1f},{:.1f}\n",
                       to_string(c.rw), c.block_size_bytes, c.queue_depth, c.threads,
                       c.single_submit ? 1 : 0, c.overlap_events ? 1 : 0,
                       result.direct_used ? 1 : 0, result.bytes, result.seconds, result.gbps,
                       result.iops, result.lat_p50_us, result.lat_p99_us);
    double& point = best[c.block_size_bytes][c.queue_depth];
    point = std::max(point, result.gbps);
  }
  csv.close();
  if (!csv) return fmt::format("could not write {}", csv_path.string());
  fs::path dat_path = csv_path;
  dat_path += ".dat";
  std::ofstream dat(dat_path);
  for (const auto& [block, depths] : best) {
    dat << "\"" << size_label(block) << "\"\n";
    for (const auto& [depth, gbps] : depths)
      dat << depth << " " << gbps << "\n";
    dat << "\n\n";
  }
  dat.close();
  fs::path png_path = csv_path;
  png_path.replace_extension(".png");
  std::string title = results.empty() ? "" : std::string(to_string(results.front().config.rw));
  std::string command =
      fmt::format("gnuplot -e \"datafile='{}'; pngfile='{}'; plottitle='{}'; blocks={}\" - 1>&2",
                  dat_path.string(), png_path.string(), title, best.size());
  FILE* gnuplot = ::popen(command.c_str(), "w");
  if (gnuplot == nullptr)
    return fmt::format("wrote {}; no PNG (cannot start gnuplot)", csv_path.string());
  std::fputs(plot_io_sweep_gp, gnuplot);
  int status = ::pclose(gnuplot);
  if (status != 0) {
    return fmt::format(
        "wrote {}; no PNG: gnuplot failed or is not installed (apt-get install "
        "gnuplot-nox), the plot data is in {}",
        csv_path.string(), dat_path.string());
  }
  return fmt::format("wrote {}, {} and its plot data {}", csv_path.string(), png_path.string(),
                     dat_path.string());
}

}  // namespace strata::tools::io

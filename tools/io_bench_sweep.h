#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

// What `strata io-bench` and `strata io-tune` share: one measured run through aio::Engine, the
// path checks, the test file (removed at the end unless --keep), the sweep grid with its
// progress bar, the CSV and the plot.
namespace strata::tools::io {

enum class Rw { read, write, randread, randwrite };

std::string_view to_string(Rw rw);
bool is_read(Rw rw);

struct RunConfig {
  std::filesystem::path dir;
  std::int64_t size_bytes = std::int64_t{4} << 30;
  Rw rw = Rw::read;
  std::int64_t block_size_bytes = 1 << 20;
  int queue_depth = 32;
  int threads = 1;
  bool direct = true;
  bool verify = false;
  bool single_submit = false;
  bool overlap_events = true;
};

struct RunResult {
  RunConfig config;
  int loop = 0;
  std::int64_t bytes = 0;
  double seconds = 0;
  double gbps = 0;  // 1e9 bytes per second
  double iops = 0;
  double lat_p50_us = 0;
  double lat_p99_us = 0;
  bool direct_used = false;  // false when the file system refused O_DIRECT
  std::string backend;       // "io_uring" or "threads"
};

// The test file inside `dir`: reused across runs and by scripts/fio_compare.sh.
std::filesystem::path bench_file(const std::filesystem::path& dir);

// Refuses (UserError, exit status 2) a `dir` that does not exist, is not a directory, is not
// writable, or lacks the free space for a `size_bytes` test file (counting what an existing test
// file already holds), saying which.
void check_path(const std::filesystem::path& dir, std::int64_t size_bytes);

// Makes sure the test file holds at least `size_bytes` of written (not merely allocated) data,
// and a checksum sidecar when `verify`; writes it through the engine otherwise. Returns true when
// it had to write.
bool prepare_file(const RunConfig& config);

// Removes the test file, its checksum sidecar and its marker unless `keep` (then the next run
// reuses it). Returns a line naming the file, its size, and whether it was removed or kept.
std::string finish_test_file(const RunConfig& config, bool keep);

// Runs `loops` transfers of config.size_bytes each and returns one result per loop.
std::vector<RunResult> run(const RunConfig& config, int loops);

nlohmann::json to_json(const RunResult& result);

// A sweep: every combination of these, for one rw.
struct Grid {
  std::vector<std::int64_t> block_sizes_bytes;
  std::vector<int> queue_depths;
  std::vector<int> threads;
  std::vector<bool> single_submit;
  std::vector<bool> overlap_events;
};

// The full grid: 128K..8M x QD 1..128 x threads 1..cores (powers of two) x single_submit
// off/on x overlap_events on/off.
Grid full_grid(int cores);

// Runs every point of `grid` (one loop each) on `base`'s path, size, rw, direct and verify.
// Draws a progress bar on stderr when it is a terminal; `on_result` sees each result.
std::vector<RunResult> sweep(const RunConfig& base, const Grid& grid,
                             const std::function<void(const RunResult&)>& on_result);

// Writes the CSV (one row per run) and, with gnuplot, a PNG of GB/s against queue depth per
// block size (the best of threads/single_submit/overlap_events at each point). Returns a line
// saying what was written, or why the PNG was not.
std::string write_csv_and_plot(const std::vector<RunResult>& results,
                               const std::filesystem::path& csv_path);

}  // namespace strata::tools::io

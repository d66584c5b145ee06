#pragma once

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "tools/train_sample.h"

namespace strata::tools {

// One point of the loss curves.
struct LossPoint {
  std::int64_t step = 0;
  double train_loss = 0;
  double validation_loss = -1;  // < 0 when not measured at this step
};

// What `strata train` prints while it runs: on a terminal one line redrawn in place (a progress
// bar), otherwise a plain line every `print_every` steps (steps_per_print), and in either case a
// kept line at least every 5% of the run, so that a long steps_per_print still shows progress.
// Each line: step, loss, lr, gradient norm, step time, tokens/s, elapsed time and what is left
// at the pace so far, the device's and the process's peak memory, and the step's traffic. Only
// rank 0 prints.
class TrainProgress {
 public:
  // The run's steps are first_step .. last_step.
  TrainProgress(std::int64_t first_step, std::int64_t last_step, std::int64_t print_every,
                bool enabled);
  void update(const engine::StepStats& stats, double tokens_per_s, double validation_loss);
  // `text` on lines of its own below the kept lines (a live line it replaces is drawn again at
  // the next step).
  void show(std::string_view text);
  void finish();

  // The steps between kept lines: steps_per_print, or 5% of the run when that is fewer.
  static std::int64_t interval(std::int64_t run_steps, std::int64_t print_every);

 private:
  std::string line(const engine::StepStats& stats, double tokens_per_s,
                   double validation_loss) const;

  std::int64_t first_step_;
  std::int64_t last_step_;
  std::int64_t interval_;
  bool enabled_;
  bool terminal_;
  std::chrono::steady_clock::time_point started_;
};

// The process's peak resident memory (getrusage's ru_maxrss), in bytes.
std::int64_t peak_rss_bytes();

// --metrics FILE.jsonl: one JSON object per step; a resumed run appends to the file.
class MetricsWriter {
 public:
  // "" writes nothing.
  explicit MetricsWriter(const std::filesystem::path& path, bool append = false);
  // `sample`: the step's --sample-every sample, if it made one ({"prompt", "text"}).
  void write(const engine::StepStats& stats, double tokens_per_s, double validation_loss,
             const std::optional<TrainSample>& sample = std::nullopt);

 private:
  std::ofstream out_;
};

// The points an earlier run of the same training wrote to <out>/loss.tsv, up to and including
// `up_to_step`: a resumed run continues the curve from them. Empty when there is no such file.
std::vector<LossPoint> earlier_losses(const std::filesystem::path& out_dir,
                                      std::int64_t up_to_step);

// Writes the curves as <out>/loss.tsv and plots <out>/loss.png with gnuplot, through
// <out>/loss.gp, which names both files relative to <out> (a copy of the folder redraws the
// PNG: `cd out && gnuplot loss.gp`). Returns the PNG's path, or "" with a warning logged when
// gnuplot is missing or fails.
std::filesystem::path plot_losses(const std::filesystem::path& out_dir,
                                  const std::vector<LossPoint>& points, double entropy_floor);

// Runs gnuplot on `script` in the script's folder; false, with a warning naming `what` and where
// its `data` is, when gnuplot is missing or fails.
bool run_gnuplot(const std::filesystem::path& script, const std::filesystem::path& data,
                 std::string_view what);

}  // namespace strata::tools

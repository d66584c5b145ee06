#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace strata::tools {

// One point of the loss curves.
struct LossPoint {
  std::int64_t step = 0;
  double train_loss = 0;
  double validation_loss = -1;  // < 0 when not measured at this step
};

// What `strata train` prints while it runs: on a terminal one line redrawn in place (a progress
// bar with step, loss, lr, tokens/s and traffic); otherwise a plain line every `print_every`
// steps. Only rank 0 prints.
class TrainProgress {
 public:
  TrainProgress(std::int64_t total_steps, std::int64_t print_every, bool enabled);
  void update(const engine::StepStats& stats, double tokens_per_s, double validation_loss);
  void finish();

 private:
  std::int64_t total_steps_;
  std::int64_t print_every_;
  bool enabled_;
  bool terminal_;
};

// --metrics FILE.jsonl: one JSON object per step; a resumed run appends to the file.
class MetricsWriter {
 public:
  // "" writes nothing.
  explicit MetricsWriter(const std::filesystem::path& path, bool append = false);
  void write(const engine::StepStats& stats, double tokens_per_s, double validation_loss);

 private:
  std::ofstream out_;
};

// Writes the curves as <out>/loss.tsv and plots <out>/loss.png with gnuplot. Returns the PNG's
// path, or "" with a warning logged when gnuplot is missing or fails.
std::filesystem::path plot_losses(const std::filesystem::path& out_dir,
                                  const std::vector<LossPoint>& points, double entropy_floor);

// Runs gnuplot on `script`; false, with a warning naming `what` and where its `data` is, when
// gnuplot is missing or fails.
bool run_gnuplot(const std::filesystem::path& script, const std::filesystem::path& data,
                 std::string_view what);

}  // namespace strata::tools
